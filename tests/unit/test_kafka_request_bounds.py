"""auth.request_bounds: the one place a Kafka connection's bounds on a request are chosen, the
settings' once authenticated, the lower pre-authentication ones before."""

from app.kafka import auth
from app.kafka.auth import SaslState, Session
from app.settings import Settings


def test_an_authenticated_connection_has_the_settings_bounds():
    settings = Settings(kafka_socket_request_max_bytes=2_000_000, kafka_max_request_entries=5_000)
    bounds = auth.request_bounds(settings, Session(SaslState.AUTHENTICATED, auth.NOBODY))
    assert bounds == auth.Bounds(2_000_000, 5_000, "OUTBOX_KAFKA_SOCKET_REQUEST_MAX_BYTES",
                                 "OUTBOX_KAFKA_MAX_REQUEST_ENTRIES")


def test_before_authentication_the_lower_bounds_hold():
    settings = Settings(kafka_socket_request_max_bytes=2_000_000, kafka_max_request_entries=5_000)
    for state in (SaslState.HANDSHAKE, SaslState.AUTHENTICATE, SaslState.RAW_TOKEN):
        bounds = auth.request_bounds(settings, Session(state))
        assert bounds == auth.Bounds(auth.UNAUTHENTICATED_MAX_FRAME_BYTES, auth.UNAUTHENTICATED_MAX_ENTRIES,
                                     "before authentication", "before authentication")


def test_settings_below_the_pre_authentication_bounds_hold_before_it_too():
    settings = Settings(kafka_socket_request_max_bytes=4_096, kafka_queued_max_request_bytes=4_096,
                        kafka_max_request_entries=10)
    bounds = auth.request_bounds(settings, Session(SaslState.HANDSHAKE))
    assert (bounds.max_frame_bytes, bounds.max_entries) == (4_096, 10)


def test_no_frame_before_authentication_is_large_enough_to_take_from_the_frame_budget():
    # So a connection that has proved nothing takes no principal's share of
    # OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES, nor any of the budget: its frames are free.
    from app.services.byte_budget import FREE_BELOW_BYTES

    settings = Settings(kafka_socket_request_max_bytes=2**31 - 1, kafka_queued_max_request_bytes=2**31 - 1)
    assert auth.request_bounds(settings, Session(SaslState.HANDSHAKE)).max_frame_bytes <= FREE_BELOW_BYTES
