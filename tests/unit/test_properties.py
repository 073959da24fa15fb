"""read_properties: a Java client's properties file as the producer's options."""

from __future__ import annotations

from pathlib import Path

import pytest

from aioproducer import Producer, read_properties
from aioproducer.errors import ConfigurationError


def test_a_java_client_properties_file_configures_a_producer(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# written for the Java client\n"
        "bootstrap.servers = k1:9092,\\\n    k2:9092\n"
        "linger.ms: 20\n"
        "client.id orders-job\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "security.protocol=SASL_SSL\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="p\\u00e4ss";\n'
        "linger.ms=25\n",
        encoding="utf-8",
    )
    options = read_properties(path)
    assert options["bootstrap.servers"] == "k1:9092,k2:9092"
    assert options["linger.ms"] == "25"  # the later entry wins
    config = Producer(options).config
    assert config.bootstrap_servers == ("k1:9092", "k2:9092")
    assert (config.linger_ms, config.client_id) == (25, "orders-job")
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("alice", "päss")


def test_errors_name_the_line_never_its_text(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("a=1\nsasl.password=s3cr\\u3t-and-more\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        read_properties(path)
    assert "line 2" in str(caught.value) and str(path) in str(caught.value)
    assert "s3cr" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="cannot read"):
        read_properties(tmp_path / "missing.properties")
