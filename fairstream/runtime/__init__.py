"""The consumer engine on aiokafka and anyio.

Modules are private (``_app``, ``_engine``, ``_scheduler``, ...); the public names
are re-exported by ``fairstream``. May import ``fairstream.assign``, ``config``,
``errors``, ``ranges``; never ``cli``, ``spark`` or ``testing``.
"""
