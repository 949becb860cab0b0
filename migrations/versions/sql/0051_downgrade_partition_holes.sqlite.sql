ALTER TABLE partitions DROP COLUMN has_holes
