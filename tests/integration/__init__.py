"""Tests against real brokers: Tansu and librdkafka's mock cluster."""
