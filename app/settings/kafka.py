"""The Kafka listener's settings (OUTBOX_KAFKA_*), what only `outbox serve` with a listener acts
on: app.settings.Settings extends KafkaSettings (through app.settings.http.HttpSettings, the
HTTP door's), which takes its model_config from LogSettings. Apart so that the listener's
bounds, and the checks among them, are read in one place."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from app.log_settings import LogSettings
from app.settings.addresses import EVERY_ADDRESS, kafka_address


class KafkaSettings(LogSettings):
    """The Kafka listener's settings; every field's name begins with kafka_ (kafka_door_settings
    finds them by it, and `outbox serve` refuses them without a listener)."""

    # The Kafka-protocol listener of `outbox serve` (app/kafka), "host:port" (port 0: any free
    # one); None: none. Same database, services and coordinator as the HTTP API.
    kafka_listener: str | None = None
    # Kafka's advertised.listeners: the "host:port" Metadata and FindCoordinator tell clients to
    # connect to, where the listener's own address is not one they can reach (a listener on
    # every interface, 0.0.0.0; a container's or a proxy's address). None: the listener's.
    kafka_advertised_listener: str | None = None
    # The broker id Metadata and FindCoordinator name this process by.
    kafka_broker_id: int = Field(default=0, ge=0, le=2**31 - 1)
    # Kafka's auto.create.topics.enable: a Metadata request that names a topic that does not
    # exist (and allows it, as clients do by default) creates it. Off by default, unlike Kafka:
    # topics are made on purpose, and a misspelt name stays an error rather than a new topic.
    kafka_auto_create_topics: bool = False
    # Kafka's num.partitions: the partition count of a topic auto-created through Metadata, and
    # of one a CreateTopics leaves to the broker (-1).
    kafka_num_partitions: int = Field(default=1, ge=1, le=2**31 - 1)
    # Kafka's socket.request.max.bytes: a larger request frame closes the connection, as there.
    kafka_socket_request_max_bytes: int = Field(default=104_857_600, ge=1024, le=2**31 - 1)
    # Kafka's queued.max.request.bytes: the bytes of request frames larger than 1 MiB the listener
    # holds at once, while they arrive and until they are answered; a frame that does not fit
    # waits (app.services.byte_budget). At least OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES.
    kafka_queued_max_request_bytes: int = Field(default=536_870_912, ge=1024, le=2**63 - 1)
    # Of those, the bytes one principal's frames hold; a frame past it waits as one past the
    # total does, its connection read no further, holding no place among the total's frames.
    # The budget is taken before a frame is read, so before its ACLs are checked: without a
    # share, a principal with a key and no ACL held the whole budget with six connections each
    # declaring a 100 MiB frame and sending a byte, and every other principal's large Produce
    # waited until they closed (up to OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS). Between
    # OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES (one whole frame fits) and the total; left unset, it
    # follows either where they leave 128 MiB (a quarter of the total, as the HTTP door's share)
    # outside. Before authentication a frame takes nothing (auth.UNAUTHENTICATED_MAX_FRAME_BYTES
    # is under the budget's FREE_BELOW_BYTES); authentication off, every client is one
    # principal whose share is the whole budget (app.kafka.server).
    kafka_queued_max_request_bytes_per_principal: int = Field(default=134_217_728, ge=1024, le=2**63 - 1)
    # Kafka's max.connections: connections past it are closed as they are accepted.
    kafka_max_connections: int = Field(default=1000, ge=1)
    # Kafka's max.connections.per.ip: connections from one client address past it are closed as
    # they are accepted. Unset (Kafka's default), one address may take all of
    # OUTBOX_KAFKA_MAX_CONNECTIONS, and a client that opens them and sends nothing keeps every
    # other client out for OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS.
    kafka_max_connections_per_ip: int | None = Field(default=None, ge=1)
    # The most entries a Kafka request's lists may hold together (a Fetch's topics and their
    # partitions, a Metadata's topic names, a DeleteGroups' group ids): a request over it closes
    # the connection before any of it is done. Kafka has no such bound, but its work per entry
    # is a lookup in memory, where here it is a database read (0.2 to 3 ms measured): a Fetch
    # naming one partition 2,000 times took 1.7 s on SQLite, 6.5 s on PostgreSQL, holding a
    # worker thread and a database connection; a 1 MB frame holds 30,000 such entries, the
    # largest frame a hundred times that.
    kafka_max_request_entries: int = Field(default=100_000, ge=1)
    # The bytes a Kafka door's group member may register (its JoinGroup protocols' names and
    # metadata together), and the bytes of the assignment a SyncGroup's leader may give each
    # member: past either the request is refused with INVALID_REQUEST and nothing changes. Both
    # are stored with the member and sent back in every DescribeGroups and to every leader, so
    # without it only the frame limit bounded them: 15 waiting members with 8 MiB of metadata
    # each took the process from 434 to 1,365 MiB. A consumer's subscription (its topics, owned
    # partitions, rack) and Kafka Streams' userdata take kilobytes; Kafka itself stores a
    # group's metadata and assignments in one record of its offsets topic, whose default bound
    # is 1 MiB for the whole group. At most OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES: no request
    # could carry more.
    kafka_group_max_metadata_bytes: int = Field(default=1_048_576, ge=1024, le=2**31 - 1)
    # The bytes of one Kafka door's group's members' protocols together, and of the assignments
    # its leader's SyncGroup gives together: a JoinGroup that would bring the members' past it,
    # or a SyncGroup whose assignments are past it, is refused with INVALID_REQUEST and nothing
    # changes. The bound above is one member's, and OUTBOX_GROUP_MAX_SIZE (1,000) members each
    # at it are 1 GiB of protocols and as much in assignments in one group, read whole by every
    # waiting JoinGroup's ask (app.kafka.groups.WAIT_POLL_S), sent to its leader and in every
    # DescribeGroups: one client could make the process hold gigabytes. At least the bound
    # above, or a member that bound lets in would be refused alone (left unset, it is raised
    # to that bound).
    kafka_group_max_total_metadata_bytes: int = Field(default=16_777_216, ge=1024, le=2**63 - 1)
    # Kafka's connections.max.idle.ms: a connection that sends nothing for this long (between
    # requests, or inside a frame that never completes) is closed.
    kafka_connections_max_idle_ms: int = Field(default=600_000, ge=1)

    @field_validator("kafka_listener")
    @classmethod
    def _check_kafka_listener(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        kafka_address(value)
        return value.strip()

    @field_validator("kafka_advertised_listener")
    @classmethod
    def _check_kafka_advertised_listener(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        host, port = kafka_address(value)
        if host in EVERY_ADDRESS or port == 0:
            # A client told to connect there connects to itself, or nowhere.
            raise ValueError(f"must be an address clients can connect to, not {value!r}")
        return value.strip()

    @property
    def kafka_address(self) -> tuple[str, int] | None:
        """OUTBOX_KAFKA_LISTENER as (host, port), or None."""
        return None if self.kafka_listener is None else kafka_address(self.kafka_listener)

    @property
    def kafka_advertised_address(self) -> tuple[str, int] | None:
        """OUTBOX_KAFKA_ADVERTISED_LISTENER as (host, port), or None: the listener's own."""
        return None if self.kafka_advertised_listener is None else kafka_address(self.kafka_advertised_listener)

    @model_validator(mode="after")
    def _check_kafka_bounds(self) -> "KafkaSettings":
        if self.kafka_queued_max_request_bytes < self.kafka_socket_request_max_bytes:
            raise ValueError("OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES is less than OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES: "
                             "a frame of the largest size would never be read")
        if "kafka_queued_max_request_bytes_per_principal" not in self.model_fields_set:
            # Left at its default, within the total set lower and above a larger frame's bound,
            # so that a deployment which set either alone starts as it did before the share
            # existed. Set in __dict__, as below.
            self.__dict__["kafka_queued_max_request_bytes_per_principal"] = min(
                max(self.kafka_queued_max_request_bytes_per_principal, self.kafka_socket_request_max_bytes),
                self.kafka_queued_max_request_bytes)
        if self.kafka_queued_max_request_bytes_per_principal > self.kafka_queued_max_request_bytes:
            raise ValueError("OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL exceeds "
                             "OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES")
        if self.kafka_queued_max_request_bytes_per_principal < self.kafka_socket_request_max_bytes:
            raise ValueError("OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL is less than "
                             "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES: a frame of the largest size would never be read")
        if (self.kafka_max_connections_per_ip is not None
                and self.kafka_max_connections_per_ip > self.kafka_max_connections):
            # Past OUTBOX_KAFKA_MAX_CONNECTIONS every new connection is closed, whatever its
            # address: a larger bound per address would never close one.
            raise ValueError(
                "OUTBOX_KAFKA_MAX_CONNECTIONS_PER_IP exceeds OUTBOX_KAFKA_MAX_CONNECTIONS"
            )
        if self.kafka_group_max_metadata_bytes > self.kafka_socket_request_max_bytes:
            # Left at its default, it is the frame limit, so that a deployment whose frames are
            # bounded below 1 MiB starts as it did. Set in __dict__: an attribute assigned
            # would count as set, and `outbox serve` without a listener would name it as given.
            if "kafka_group_max_metadata_bytes" in self.model_fields_set:
                raise ValueError("OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES exceeds OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES: "
                                 "no request could carry that much")
            self.__dict__["kafka_group_max_metadata_bytes"] = self.kafka_socket_request_max_bytes
        if self.kafka_group_max_total_metadata_bytes < self.kafka_group_max_metadata_bytes:
            # Left at its default, it follows a member's bound set above it: a deployment that
            # raised that bound before this one existed starts as it did.
            if "kafka_group_max_total_metadata_bytes" in self.model_fields_set:
                raise ValueError("OUTBOX_KAFKA_GROUP_MAX_TOTAL_METADATA_BYTES is less than "
                                 "OUTBOX_KAFKA_GROUP_MAX_METADATA_BYTES: a group could not hold one member at that bound")
            self.__dict__["kafka_group_max_total_metadata_bytes"] = self.kafka_group_max_metadata_bytes
        return self

    @classmethod
    def kafka_door_settings(cls) -> frozenset[str]:
        """The Kafka listener's settings (OUTBOX_KAFKA_*), kafka_listener among them: what only
        `outbox serve` with a listener acts on."""
        return frozenset(name for name in cls.model_fields if name.startswith("kafka_"))

    def kafka_settings_without_listener(self) -> list[str]:
        """The Kafka listener's own settings that were set while no listener runs: what `outbox
        serve` refuses once --kafka-listener is read."""
        if self.kafka_listener is not None:
            return []
        return [f"OUTBOX_{name.upper()}" for name in sorted(self.model_fields_set & self.kafka_door_settings())
                if name != "kafka_listener"]
