"""The warnings `outbox serve` (and the coordinator's HTTPS metrics) give at start about its TLS
files (app.services.tls_accept.tls_file_warnings): an expired certificate, a key file its group
or others may read."""

from __future__ import annotations

import datetime
from pathlib import Path

from app.services.tls_accept import tls_file_warnings
from tests.kafka.secured import self_signed_certificate

# self_signed_certificate's certificate is valid for a day from now.
NOW = datetime.datetime.now(datetime.UTC)


def test_a_valid_certificate_and_a_key_its_owner_alone_reads_give_no_warning(tmp_path: Path) -> None:
    cert_file, key_file = self_signed_certificate(tmp_path)
    assert tls_file_warnings(str(cert_file), str(key_file), NOW) == []


def test_an_expired_certificate_is_warned_of(tmp_path: Path) -> None:
    cert_file, key_file = self_signed_certificate(tmp_path)
    [warning] = tls_file_warnings(str(cert_file), str(key_file), NOW + datetime.timedelta(days=2))
    assert warning.startswith(f"OUTBOX_TLS_CERT_FILE: the certificate in {cert_file} (CN=outbox-test) expired on ")
    assert warning.endswith(" UTC: TLS clients will refuse it")


def test_a_key_file_its_group_or_others_may_read_is_warned_of(tmp_path: Path) -> None:
    cert_file, key_file = self_signed_certificate(tmp_path)
    for mode in (0o640, 0o604):
        key_file.chmod(mode)
        assert tls_file_warnings(str(cert_file), str(key_file), NOW) == [
            f"OUTBOX_TLS_KEY_FILE: {key_file} (mode {mode:04o}) is readable by its group or others, who may then "
            f"pose as this service; make it readable by the service's user only (chmod 600 {key_file})"]
    key_file.chmod(0o620)  # writable by the group, not readable: not this warning's business
    assert tls_file_warnings(str(cert_file), str(key_file), NOW) == []


def test_a_key_in_the_certificate_file_is_looked_at_there(tmp_path: Path) -> None:
    cert_file, key_file = self_signed_certificate(tmp_path)
    both = tmp_path / "both.pem"
    both.write_bytes(cert_file.read_bytes() + key_file.read_bytes())
    both.chmod(0o644)
    assert [w.split(":")[0] for w in tls_file_warnings(str(both), None, NOW)] == ["OUTBOX_TLS_KEY_FILE"]
