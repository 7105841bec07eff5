"""base_image: which of this machine's pip settings and certificates the stand-in base
carries, and that its tag follows them (the image itself is built in test_docker_image.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from vertex_trainer_tools import base_image, cli


def test_pip_settings_keep_network_settings_and_drop_local_paths(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\n"
        "find-links = /opt/wheels\n"
        "extra-index-url = file:///opt/pypi/simple https://mirror.example.com/simple\n"
        "cert = /etc/ssl/certs/ca-certificates.crt\n"
        "trusted-host = mirror.example.com\n"
        "[install]\n"
        "proxy = http://proxy.example.com:3128\n"
    )
    settings = base_image.pip_settings([conf], {"PIP_DEFAULT_TIMEOUT": "180"})
    assert settings == {
        "extra-index-url": "https://mirror.example.com/simple",
        "trusted-host": "mirror.example.com",
        "proxy": "http://proxy.example.com:3128",
        "timeout": "180",
        "cert": base_image.CA_BUNDLE,
    }


def test_environment_overrides_files_and_local_only_indexes_vanish(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://a.example.com/simple\n")
    environ = {"PIP_INDEX_URL": "https://b.example.com/simple", "PIP_FIND_LINKS": "/opt/w"}
    assert base_image.pip_settings([conf], environ)["index-url"] == "https://b.example.com/simple"
    local = base_image.pip_settings([], {"PIP_EXTRA_INDEX_URL": "file:///srv/simple"})
    assert local == {"cert": base_image.CA_BUNDLE}


def test_tag_changes_with_certificates_and_pip_settings(tmp_path):
    cert = tmp_path / "corp.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n")
    plain = base_image.default_tag("bookworm", [], "[global]\n")
    assert plain.startswith(f"{base_image.REPOSITORY}:bookworm-")
    assert plain == base_image.default_tag("bookworm", [], "[global]\n"), "stable: a cache key"
    assert base_image.default_tag("bookworm", [cert], "[global]\n") != plain
    assert base_image.default_tag("bookworm", [], "[global]\ntimeout = 9\n") != plain
    assert base_image.default_tag("trixie", [], "[global]\n") != plain


def test_missing_engine_is_one_error_line(tmp_path, monkeypatch, capsys):
    script = tmp_path / "docker"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('Cannot connect to the daemon')\n")
    script.chmod(0o755)
    monkeypatch.setenv("DOCKER", str(script))
    assert cli.main(["base-image"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("ERROR: base-image: ") and "Cannot connect to the daemon" in line
    assert Path(script).exists()
