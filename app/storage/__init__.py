"""Storage: SQLAlchemy Core tables and the queries over them, one module per concern."""
