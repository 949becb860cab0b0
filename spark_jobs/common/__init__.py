"""What the reads and the writes of the `outbox` data source share.

    options.py   the one table of options, both directions, and how they are read
    service.py   the service's HTTP session (the project's client, app.client.http)
    positions.py positions and their JSON form; log bounds and group offsets from the service
"""
