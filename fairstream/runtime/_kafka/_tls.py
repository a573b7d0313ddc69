"""Why a TLS connection to the cluster fails, in words a user can act on.

aiokafka logs the TLS error of each failed connection and then raises
``KafkaConnectionError("Unable to bootstrap from [...]")``, which names no cause: a
wrong CA, a missing client certificate and a broker that speaks no TLS all read the
same. When a secured client cannot start, the engine makes one handshake of its own
with the same ``SSLContext`` to the first bootstrap address and puts the reason and
the setting to check into the error.
"""

from __future__ import annotations

import ssl

import anyio

__all__ = ["tls_problem"]

# How long the probe waits: for the handshake, then for the broker to refuse the
# client's certificate (TLS 1.3 sends that alert after the client finished).
_HANDSHAKE_SECONDS = 5.0
_ALERT_SECONDS = 1.0

_HINTS = (
    (
        "CERTIFICATE_VERIFY_FAILED",
        "check security.ssl_cafile: it must hold the CA that signed the broker's "
        "certificate, and the certificate must name the host you connect to",
    ),
    (
        "CERTIFICATE_REQUIRED",
        "the broker asks for a client certificate: set security.ssl_certfile and "
        "ssl_keyfile to one its CA signed",
    ),
    (
        "UNKNOWN_CA",
        "the broker does not trust the client certificate: check security.ssl_certfile",
    ),
    (
        "WRONG_VERSION_NUMBER",
        "the broker does not speak TLS on this port: check security.protocol and the port",
    ),
)


def _first_address(bootstrap: str) -> tuple[str, int] | None:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


def _describe(exc: ssl.SSLError, host: str, port: int) -> str:
    reason = exc.reason or type(exc).__name__
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason += f" ({exc.verify_message})"
    hint = next((hint for key, hint in _HINTS if key in reason), "check security.*")
    return f"the TLS handshake with {host}:{port} failed: {reason}; {hint}"


async def tls_problem(bootstrap: str, context: ssl.SSLContext) -> str | None:
    """The TLS error a handshake with the first bootstrap address meets, with what to
    check; ``None`` when the handshake works, or the address cannot be reached at all."""
    address = _first_address(bootstrap)
    if address is None:
        return None
    host, port = address
    try:
        with anyio.fail_after(_HANDSHAKE_SECONDS):
            # Not standard compatible: closing sends no close_notify, so a connection
            # the broker already refused closes without a second, misleading error.
            stream = await anyio.connect_tcp(
                host, port, ssl_context=context, tls_hostname=host, tls_standard_compatible=False
            )
    except ssl.SSLError as exc:
        return _describe(exc, host, port)
    except (OSError, TimeoutError):
        return None  # unreachable: the generic message fits
    try:
        with anyio.move_on_after(_ALERT_SECONDS):
            await stream.receive(1)
    except ssl.SSLError as exc:
        return _describe(exc, host, port)
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
        pass  # closed without a TLS error: the generic message fits
    finally:
        await stream.aclose()
    return None
