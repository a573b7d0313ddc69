"""Tests of ``fairstream/runtime/_kafka/``."""
