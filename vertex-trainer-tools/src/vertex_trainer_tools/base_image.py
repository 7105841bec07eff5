"""Make a stand-in base image offline: Debian + Python in a venv, no registry needed.

    vertex-tools base-image [--tag T] [--suite bookworm] [--mirror URL] [--print-tag]

The real bases (Deep Learning Containers, nvidia/cuda) come from registries that an air-gapped
or proxied machine may not reach. This builds one from Debian's packages instead:
``debootstrap --variant=minbase`` plus python3 and a virtual environment at /opt/venv first on
PATH (``python`` and ``pip``, as the Dockerfiles expect from a DLC base), then ``docker
import``. It carries this machine's extra CA certificates (/usr/local/share/ca-certificates)
and the network settings of its pip configuration (index URLs, trusted hosts, proxy, timeout;
local folders are left out, a container cannot see them), so ``pip install`` inside ``make
build BASE_IMAGE=<tag>`` reaches the same package index as this machine. The tag names a hash
of all that: an existing tag is reused, so the minute it takes is spent once. Needs
``debootstrap`` (``apt-get install debootstrap``) and root, or password-less ``sudo`` for its
root steps. bookworm's Python is 3.11; Vertex's prebuilt images run 3.10, so this base is for
building and testing the image, not a copy of the production one.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vertex_trainer_tools.build import check_engine, failed
from vertex_trainer_tools.errors import ToolError

REPOSITORY = "local/vertex-trainer-base"
LABEL = "vertex-trainer.base"
VENV = "/opt/venv"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's bundle, extra certificates included
PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECIPE_VERSION = "1"  # bump when the steps below change what the image holds
# pip settings that reach a package index over the network; the rest stays on this machine.
PIP_NETWORK_KEYS = ("index-url", "extra-index-url", "trusted-host", "proxy", "timeout", "retries")
PIP_ENV_KEYS = {
    "PIP_INDEX_URL": "index-url",
    "PIP_EXTRA_INDEX_URL": "extra-index-url",
    "PIP_TRUSTED_HOST": "trusted-host",
    "PIP_PROXY": "proxy",
    "PIP_DEFAULT_TIMEOUT": "timeout",
    "PIP_TIMEOUT": "timeout",
    "PIP_RETRIES": "retries",
}


def pip_config_files() -> list[Path]:
    """pip's own search order: global, then user, then PIP_CONFIG_FILE (later wins)."""
    home = Path.home()
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
    candidates = [Path(d, "pip", "pip.conf") for d in xdg_dirs if d]
    candidates += [Path("/etc/pip.conf"), home / ".pip/pip.conf", home / ".config/pip/pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        candidates.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return [path for path in candidates if path.is_file()]


def _remote(values: str) -> str:
    """Only URLs a container can reach: file:// URLs and folders are this machine's."""
    return " ".join(v for v in values.split() if v.startswith(("http://", "https://")))


def pip_settings(files: list[Path], environ: dict[str, str]) -> dict[str, str]:
    """The [global] pip settings for the image, from this machine's files and PIP_* vars."""
    settings: dict[str, str] = {}
    for path in files:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for key in PIP_NETWORK_KEYS:
                    if parser.has_option(section, key):
                        settings[key] = parser.get(section, key).strip()
    for name, key in PIP_ENV_KEYS.items():
        if environ.get(name):
            settings[key] = environ[name].strip()
    for key in ("index-url", "extra-index-url"):
        if key in settings:
            settings[key] = _remote(settings[key])
    settings = {key: value for key, value in settings.items() if value}
    settings["cert"] = CA_BUNDLE
    return settings


def extra_certificates() -> list[Path]:
    if not EXTRA_CA_DIR.is_dir():
        return []
    return sorted(path for path in EXTRA_CA_DIR.rglob("*.crt") if path.is_file())


def pip_conf_text(settings: dict[str, str]) -> str:
    lines = ["# Copied by base_image.py from the network settings of the host's pip."]
    lines += ["[global]", *[f"{key} = {value}" for key, value in sorted(settings.items())]]
    return "\n".join(lines) + "\n"


def default_tag(suite: str, certificates: list[Path], pip_conf: str) -> str:
    digest = hashlib.sha256()
    for part in (RECIPE_VERSION, suite, *PACKAGES, pip_conf):
        digest.update(part.encode() + b"\0")
    for path in certificates:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"{REPOSITORY}:{suite}-{digest.hexdigest()[:12]}"


def run(command: list[str], what: str, **kwargs) -> None:
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise failed(f"{what} failed: {lines[-1].strip() if lines else result.returncode}")


def as_root() -> list[str]:
    """The prefix that runs a command as root: none for root, else password-less sudo."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"]).returncode == 0:
        return ["sudo", "-n"]
    raise failed("debootstrap and chroot need root: run this as root or with sudo")


def make_rootfs(
    root: Path, suite: str, mirror: str, certificates: list[Path], pip_conf: Path, sudo: list[str]
) -> None:
    include = ",".join(PACKAGES)
    run(
        [
            *sudo,
            "debootstrap",
            "--variant=minbase",
            f"--include={include}",
            suite,
            str(root),
            mirror,
        ],
        f"debootstrap of Debian {suite} from {mirror}",
    )
    for path in certificates:
        target = root / EXTRA_CA_DIR.relative_to("/") / path.name
        run([*sudo, "install", "-D", "-m", "0644", str(path), str(target)], "copying certificates")
    if certificates:
        run([*sudo, "chroot", str(root), "update-ca-certificates"], "update-ca-certificates")
    run([*sudo, "install", "-m", "0644", str(pip_conf), str(root / "etc/pip.conf")], "pip.conf")
    run([*sudo, "chroot", str(root), "python3", "-m", "venv", VENV], "python3 -m venv")
    caches = [str(root / "var/cache/apt/archives"), str(root / "var/lib/apt/lists")]
    run([*sudo, "find", *caches, "-type", "f", "-delete"], "removing apt caches")


def docker_import(docker: str, root: Path, tag: str, sudo: list[str]) -> None:
    changes = [
        f"ENV PATH={PATH}",
        "ENV LANG=C.UTF-8",
        f"ENV VIRTUAL_ENV={VENV}",
        f"LABEL {LABEL}={tag.rsplit(':', 1)[1]}",
        'CMD ["python"]',
    ]
    print(f"+ tar -C {root} -c . | {docker} import ... - {tag}", file=sys.stderr, flush=True)
    tar = subprocess.Popen([*sudo, "tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    command = [docker, "import", *[f"--change={c}" for c in changes], "-", tag]
    imported = subprocess.run(command, stdin=tar.stdout, capture_output=True, text=True)
    tar.stdout.close()
    if tar.wait() != 0 or imported.returncode != 0:
        raise failed(f"docker import failed: {imported.stderr.strip() or 'tar failed'}")


def image_exists(docker: str, tag: str) -> bool:
    inspect = subprocess.run([docker, "image", "inspect", tag], capture_output=True)
    return inspect.returncode == 0


def default_tag_here(suite: str = DEFAULT_SUITE) -> str:
    """The tag ``ensure`` gives the base on this machine (its certificates and pip settings)."""
    pip_conf = pip_conf_text(pip_settings(pip_config_files(), dict(os.environ)))
    return default_tag(suite, extra_certificates(), pip_conf)


def ensure(
    tag: str = "", suite: str = DEFAULT_SUITE, mirror: str = DEFAULT_MIRROR, docker: str = ""
) -> str:
    """The stand-in base's tag, built unless an image with that tag exists."""
    docker = docker or os.environ.get("DOCKER", "docker")
    certificates = extra_certificates()
    pip_conf = pip_conf_text(pip_settings(pip_config_files(), dict(os.environ)))
    tag = tag or default_tag_here(suite)
    check_engine(docker)
    if image_exists(docker, tag):
        print(f"{tag} exists: reusing it", file=sys.stderr)
        return tag
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        raise failed("debootstrap not found: install it (apt-get install debootstrap)")
    sudo = as_root()
    folder = Path(tempfile.mkdtemp(prefix="vertex-base-", dir="/var/tmp"))
    try:
        (folder / "pip.conf").write_text(pip_conf)
        make_rootfs(folder / "rootfs", suite, mirror, certificates, folder / "pip.conf", sudo)
        docker_import(docker, folder / "rootfs", tag, sudo)
    finally:
        subprocess.run([*sudo, "rm", "-rf", str(folder)])
    print(f"Made {tag} ({len(certificates)} extra CA certificates)", file=sys.stderr)
    return tag


def command(args: argparse.Namespace) -> int:
    """``vertex-tools base-image``."""
    if args.print_tag:
        print(args.tag or default_tag_here(args.suite))
        return 0
    try:
        tag = ensure(args.tag, args.suite, args.mirror)
    except ToolError as error:  # its lines name this command: docker or debootstrap failed
        lines = (f"base-image: {line}" for line in error.lines)
        raise ToolError(*lines, exit_code=error.exit_code) from None
    print(tag)
    print(f"Build on it: make build BASE_IMAGE={tag}", file=sys.stderr)
    return 0
