"""Dead-letter topic names Kafka would refuse are refused when configured (issue #38,
defect 5): before, ``topic_suffix="/dlq"`` was accepted and the first dead letter
waited for over 20 s without a word (noida even created ``dlq-x/dlq``)."""

from __future__ import annotations

import pytest

from fairstream import App, ConfigError, DeadLetterPolicy


@pytest.mark.parametrize(
    ("suffix", "needles"),
    [
        pytest.param("/dlq", ("topic_suffix='/dlq'", "has '/'", "a-z, A-Z, 0-9"), id="slash"),
        pytest.param(".dead letters", ("has ' '",), id="space"),
        pytest.param(".dlq\u00e9", ("has '\u00e9'",), id="non-ascii"),
        pytest.param("x" * 249, ("249 characters long", "limit of 249"), id="too-long"),
    ],
)
def test_a_suffix_no_topic_name_may_have_is_refused_when_built(
    suffix: str, needles: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        DeadLetterPolicy(topic_suffix=suffix)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("suffix", [".dlq", "-dead_letters", "." + "d" * 200, "x" * 248])
def test_legal_suffixes_are_accepted(suffix: str) -> None:
    DeadLetterPolicy(topic_suffix=suffix)


def test_a_dead_letter_topic_name_over_249_characters_is_refused_at_registration() -> None:
    suffix = "." + "d" * 200
    app = App(
        bootstrap="127.0.0.1:1", group_id="g", dead_letter=DeadLetterPolicy(topic_suffix=suffix)
    )
    app.subscriber("t" * 48)  # 249 characters with the suffix: Kafka's longest name
    with pytest.raises(ConfigError) as caught:
        app.subscriber("orders", "u" * 49)
    message = str(caught.value)
    assert f"topic_suffix={suffix!r}" in message
    assert f"dead-letter topic of topic {'u' * 49!r}" in message
    assert "250 characters long: Kafka allows at most 249" in message
    # The subscriber's own policy is checked the same way.
    with pytest.raises(ConfigError, match="250 characters long"):
        App(bootstrap="127.0.0.1:1", group_id="g").subscriber(
            "v" * 49, dead_letter=DeadLetterPolicy(topic_suffix=suffix)
        )


def test_a_topic_whose_dead_letter_name_is_illegal_is_refused_at_registration() -> None:
    app = App(bootstrap="127.0.0.1:1", group_id="g")
    with pytest.raises(ConfigError, match=r"of topic 'a/b' would be 'a/b.dlq', which has '/'"):
        app.subscriber("a/b")


def test_names_are_not_checked_where_nothing_is_dead_lettered() -> None:
    """``skip`` and ``stop`` publish nothing: a long topic needs no room for a suffix."""
    app = App(bootstrap="127.0.0.1:1", group_id="g")
    app.subscriber("t" * 249, dead_letter=DeadLetterPolicy(on_error="skip"))
