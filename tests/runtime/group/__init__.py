"""Tests of ``fairstream/runtime/group/``."""
