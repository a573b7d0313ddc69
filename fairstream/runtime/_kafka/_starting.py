"""Starting an aiokafka client, with a failure in words a user can act on.

aiokafka's own errors at start name no setting: "Unable to bootstrap from [...]"
reads the same for a wrong address, a broker that is down and a TLS setting the
broker refuses. Each client of a member (its group consumer, its producer) starts
through :func:`start_client`, which says which one could not start and what to check.
"""

from __future__ import annotations

import ssl
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaError

from fairstream.errors import BrokerError, describe
from fairstream.runtime._kafka._admin import may_pass
from fairstream.runtime._kafka._tls import tls_problem

__all__ = ["start_client"]


async def start_client(client: Any, what: str, *, bootstrap: str, common: dict[str, Any]) -> None:
    """Start ``client`` (``what`` names it); ``common`` are the kwargs it was built with.

    :raises BrokerError: the cluster cannot be reached (retriable, with the settings to
        check, or the TLS problem found), or the client failed to start.
    """
    try:
        await client.start()
    except KafkaConnectionError as exc:
        context = common.get("ssl_context")
        problem = None
        if isinstance(context, ssl.SSLContext):
            problem = await tls_problem(bootstrap, context)
        if problem is not None:
            raise BrokerError(
                f"cannot reach the Kafka cluster to start the {what}: {problem}",
                bootstrap=bootstrap,
            ) from exc
        check = "the bootstrap address (--bootstrap or FAIRSTREAM_BOOTSTRAP)"
        if common.get("security_protocol", "PLAINTEXT") != "PLAINTEXT":
            check += ", the security settings (protocol, SASL mechanism, credentials, CA)"
        raise BrokerError(
            f"cannot reach the Kafka cluster to start the {what}: {exc}; check {check} "
            "and that the broker runs",
            bootstrap=bootstrap,
            retriable=True,
        ) from exc
    except KafkaError as exc:
        raise BrokerError(
            f"the {what} could not start: {describe(exc)}",
            bootstrap=bootstrap,
            retriable=may_pass(exc),
        ) from exc
