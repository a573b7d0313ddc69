"""A module behind a missing extra fails with one line that names the extra to install."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairstream._extras import MissingExtraError


@pytest.mark.parametrize(
    ("module", "package", "extra", "feature"),
    [
        ("fairstream.prometheus", "prometheus_client", "prometheus", "fairstream.prometheus"),
        ("fairstream.otel", "opentelemetry", "otel", "fairstream.otel"),
        ("fairstream.spark.cluster", "confluent_kafka", "spark", "the Spark backfill"),
    ],
)
def test_importing_without_the_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, extra: str, feature: str
) -> None:
    # A None entry in sys.modules is how Python marks a module as not importable.
    monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(module)
    assert isinstance(raised.value, MissingExtraError) and raised.value.name == package
    assert str(raised.value) == (
        f"{feature} needs the {extra!r} extra ({package} is missing); "
        f"run: pip install 'fairstream[{extra}]'"
    )


def test_fairstream_run_says_which_extra_the_app_needs(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(
        "from fairstream import App\n"
        "from fairstream.prometheus import FairstreamCollector\n"
        "app = App(group_id='shop')\n"
    )
    without_the_extra = (
        "import sys; sys.modules['prometheus_client'] = None; "
        "from fairstream.cli import main; sys.exit(main(['run', 'shop:app']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", without_the_extra],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "fairstream run: error: app='shop:app': module 'shop' needs the 'prometheus' extra "
        "(prometheus_client missing); run: pip install 'fairstream[prometheus]'\n"
    )
