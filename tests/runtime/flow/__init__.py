"""Tests of ``fairstream/runtime/flow/``."""
