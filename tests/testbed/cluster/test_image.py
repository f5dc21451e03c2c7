"""The node image: what decides its tag (pure), and what the built image holds (real Docker)."""

from __future__ import annotations

import contextlib
import io
import shutil
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
import pytest

from testbed.cluster import image as image_module
from testbed.cluster.debian_base import find_apt_sources_file
from testbed.cluster.image import (
    CODE_DIRECTORIES,
    IMAGE_APP_DIR,
    IMAGE_PYTHON,
    ensure_image,
    image_content_hash,
    prune_images,
    snapshot_sources,
    source_root,
)
from testbed.cluster.image_build import ImageBuildError
from testbed.cluster.wheelhouse import PythonTarget, host_pins

BOOKWORM = """Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def make_source_tree(root: Path) -> Path:
    (root / "broker_impl").mkdir(parents=True)
    (root / "nemesis" / "lazyfs").mkdir(parents=True)
    (root / "testbed" / "cluster" / "request_proxy").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / "broker_impl" / "__init__.py").write_text('"""broker."""\n')
    (root / "nemesis" / "__init__.py").write_text("")
    (root / "nemesis" / "lazyfs" / "__init__.py").write_text("")
    (root / "testbed" / "cluster" / "request_proxy" / "__init__.py").write_text("")
    return root


# -- apt sources ---------------------------------------------------------------------------------


def test_apt_sources_prefers_debian_sources_that_list_bookworm(tmp_path: Path) -> None:
    (tmp_path / "aaa.sources").write_text(BOOKWORM)
    (tmp_path / "debian.sources").write_text(BOOKWORM)
    assert find_apt_sources_file(tmp_path) == tmp_path / "debian.sources"


def test_apt_sources_skips_disabled_stanzas_other_suites_and_one_line_lists(tmp_path: Path) -> None:
    (tmp_path / "debian.sources").write_text(BOOKWORM.replace("Types: deb", "Enabled: no\nTypes: deb"))
    (tmp_path / "nodesource.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n"
    )
    (tmp_path / "google.list").write_text(
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
    )
    (tmp_path / "zz-mirror.sources").write_text("# local mirror\n" + BOOKWORM)
    assert find_apt_sources_file(tmp_path) == tmp_path / "zz-mirror.sources"


def test_apt_sources_without_a_bookworm_file_is_an_error_naming_the_directory(tmp_path: Path) -> None:
    (tmp_path / "ubuntu.sources").write_text(
        "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu\nSuites: noble\n"
    )
    with pytest.raises(ImageBuildError, match=f"{tmp_path}.*--apt-sources"):
        find_apt_sources_file(tmp_path)


# -- what names the image ----------------------------------------------------------------------------


def test_content_hash_is_stable_and_changes_with_every_input(tmp_path: Path) -> None:
    root = make_source_tree(tmp_path)
    pins = ("kafka-python==3.0.12",)
    reference = image_content_hash("sha256:base", pins, snapshot_sources(root))
    assert image_content_hash("sha256:base", pins, snapshot_sources(root)) == reference
    assert image_content_hash("sha256:other", pins, snapshot_sources(root)) != reference
    assert image_content_hash("sha256:base", ("kafka-python==3.0.13",), snapshot_sources(root)) != reference

    changes: list[Callable[[], object]] = [
        lambda: (root / "Dockerfile").write_text("FROM scratch\nRUN true\n"),
        lambda: (root / "broker_impl" / "__init__.py").write_text('"""changed."""\n'),
        lambda: (root / "nemesis" / "lazyfs" / "fs.py").write_text("x = 1\n"),
        lambda: (root / "nemesis" / "lazyfs" / "fs.py").chmod(0o755),
    ]
    seen = {reference}
    for change in changes:
        change()
        digest = image_content_hash("sha256:base", pins, snapshot_sources(root))
        assert digest not in seen
        seen.add(digest)


def test_bytecode_caches_do_not_change_the_hash(tmp_path: Path) -> None:
    root = make_source_tree(tmp_path)
    before = image_content_hash("sha256:base", (), snapshot_sources(root))
    (root / "broker_impl" / "__pycache__").mkdir()
    (root / "broker_impl" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "nemesis" / "lazyfs" / "stray.pyc").write_bytes(b"\0")
    assert image_content_hash("sha256:base", (), snapshot_sources(root)) == before


def test_a_missing_code_package_is_a_clear_error(tmp_path: Path) -> None:
    root = make_source_tree(tmp_path)
    shutil.rmtree(root / "nemesis" / "lazyfs")
    with pytest.raises(ImageBuildError, match="nemesis/lazyfs is missing"):
        snapshot_sources(root)


def test_source_root_is_the_checkout_with_the_dockerfile() -> None:
    assert (source_root() / "Dockerfile").is_file()
    assert (source_root() / "testbed" / "cluster" / "image.py").is_file()


# -- only the node-side programs ship: on a private copy of the real checkout --------------------------

CHECKOUT_PARTS = ("Dockerfile", "broker_impl", "nemesis", "checker", "harness", "testbed")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the checkout's Dockerfile and packages (shipped or not): edits others make meanwhile
    cannot change the outcome, and the tests can edit freely."""
    root = tmp_path / "checkout"
    root.mkdir()
    for part in CHECKOUT_PARTS:
        source = source_root() / part
        if source.is_dir():
            shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, root / part)
    return root


def edit(root: Path, relative: str) -> None:
    """Append a line to the file (creating it, and its directory, when it does not exist)."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as stream:
        stream.write("# edited\n")


def test_the_image_holds_the_node_side_programs_and_nothing_else_of_the_checkout(checkout: Path) -> None:
    assert CODE_DIRECTORIES == ("broker_impl", "nemesis/lazyfs", "testbed/cluster/request_proxy")
    shipped = [relative for relative, _, _ in snapshot_sources(checkout).files]
    assert shipped[0] == "Dockerfile"
    assert all(relative.startswith(tuple(f"{d}/" for d in CODE_DIRECTORIES)) for relative in shipped[1:])
    assert {
        "broker_impl/__init__.py",
        "broker_impl/dump.py",
        "nemesis/lazyfs/__main__.py",
        "testbed/cluster/request_proxy/__main__.py",
    } <= set(shipped)
    assert "nemesis/__init__.py" not in shipped  # nemesis is a namespace package inside the image
    assert "testbed/__init__.py" not in shipped and "testbed/cluster/__init__.py" not in shipped


@pytest.mark.parametrize(
    "relative",
    [
        "broker_impl/broker.py",
        "broker_impl/new_module.py",
        "nemesis/lazyfs/model.py",
        "nemesis/lazyfs/__main__.py",
        "nemesis/lazyfs/new_module.py",
        "testbed/cluster/request_proxy/proxy.py",
    ],
)
def test_a_change_to_the_node_side_programs_changes_the_hash(checkout: Path, relative: str) -> None:
    before = image_content_hash("sha256:base", (), snapshot_sources(checkout))
    edit(checkout, relative)
    assert image_content_hash("sha256:base", (), snapshot_sources(checkout)) != before


@pytest.mark.parametrize(
    "relative",
    [
        "nemesis/__init__.py",
        "nemesis/plan.py",
        "nemesis/mechanism.py",
        "nemesis/scenario.py",
        "nemesis/new_fault.py",
        "nemesis/scenarios/new.toml",
        "checker/__init__.py",
        "checker/engine.py",
        "harness/__init__.py",
        "testbed/cluster/image.py",
        "harness/report/new_section.py",
    ],
)
def test_a_change_outside_the_node_side_programs_keeps_the_hash(checkout: Path, relative: str) -> None:
    before = image_content_hash("sha256:base", (), snapshot_sources(checkout))
    edit(checkout, relative)
    assert image_content_hash("sha256:base", (), snapshot_sources(checkout)) == before


def test_wheel_platforms_cover_every_older_manylinux() -> None:
    arguments = PythonTarget(version="311", machine="x86_64", glibc_minor=36).pip_platform_arguments()
    platforms = {arguments[index + 1] for index, value in enumerate(arguments) if value == "--platform"}
    assert {"manylinux_2_36_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"} <= platforms
    assert "manylinux_2_37_x86_64" not in platforms
    assert arguments[arguments.index("--python-version") + 1] == "3.11"


# -- the built image (real Docker) ---------------------------------------------------------------


def run_in_image(client: docker.DockerClient, tag: str, script: str) -> str:
    output = client.containers.run(
        tag,
        ["/bin/sh", "-c", script],
        entrypoint=[],
        remove=True,
        network_disabled=True,
        labels={"tidemark": "1"},
    )
    return bytes(output).decode()


@pytest.mark.docker
def test_image_holds_the_tools_the_code_and_the_pinned_packages(
    docker_client: docker.DockerClient, image: str
) -> None:
    script = f"""set -e
for tool in ip iptables ps pkill fusermount3 /usr/sbin/sshd /usr/lib/openssh/sftp-server tini timeout setsid; do
    command -v "$tool" > /dev/null || {{ echo "missing $tool"; exit 1; }}
done
ls /etc/ssh/ssh_host_* 2>/dev/null && {{ echo "host keys baked into the image"; exit 1; }}
{IMAGE_PYTHON} -c '
import sys, importlib.metadata as metadata
import broker_impl, nemesis.lazyfs, kafka, google_crc32c, mfusepy
print(sys.version_info[:2])
for name in ("kafka-python", "google-crc32c", "mfusepy"):
    print(f"{{name}}=={{metadata.version(name)}}")
'
"""
    lines = run_in_image(docker_client, image, script).split()
    assert lines[:2] == ["(3,", "11)"]
    assert tuple(lines[2:]) == host_pins()


@pytest.mark.docker
def test_image_ships_only_broker_impl_and_lazyfs_and_both_run(
    docker_client: docker.DockerClient, image: str
) -> None:
    """No planner, checker or harness code in the image; ``nemesis`` is a namespace package there
    (no ``__init__.py``), and both node-side programs start with the image's interpreter."""
    script = f"""set -e
cd /
ls -a {IMAGE_APP_DIR}
echo =====
ls -a {IMAGE_APP_DIR}/nemesis
echo =====
{IMAGE_PYTHON} -c 'import nemesis, nemesis.lazyfs.fuse_adapter; print(getattr(nemesis, "__file__", None), *nemesis.__path__)'
echo =====
{IMAGE_PYTHON} -m nemesis.lazyfs --help
echo =====
{IMAGE_PYTHON} -m broker_impl.dump --help
echo =====
{IMAGE_PYTHON} -m testbed.cluster.request_proxy --help
"""
    app, nemesis_directory, namespace, lazyfs_help, dump_help, proxy_help = run_in_image(
        docker_client, image, script
    ).split("=====\n")
    assert app.split() == [".", "..", "broker_impl", "nemesis", "testbed"]
    assert proxy_help.startswith("usage: python -m testbed.cluster.request_proxy ")
    assert nemesis_directory.split() == [".", "..", "lazyfs"]
    assert namespace.split() == ["None", f"{IMAGE_APP_DIR}/nemesis"]
    assert lazyfs_help.startswith("usage: python -m nemesis.lazyfs ")
    assert dump_help.startswith("usage: python -m broker_impl.dump ")


@pytest.mark.docker
def test_unchanged_sources_reuse_the_image_and_changed_ones_get_a_new_tag(
    docker_client: docker.DockerClient, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a private copy of the checkout, so that edits others make meanwhile cannot change the outcome."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy2(source_root() / "Dockerfile", root / "Dockerfile")
    for package in (
        "broker_impl",
        "nemesis",
        "testbed/cluster/request_proxy",
    ):  # every shipped one, and the planner
        shutil.copytree(source_root() / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    # A file no other checkout has makes both tags unique to this test, so removing them is safe. It
    # must be in a shipped directory: elsewhere it would not change the tag.
    (root / "nemesis" / "lazyfs" / f"test-{uuid.uuid4().hex}.txt").write_text("unique\n")
    monkeypatch.setattr(image_module, "source_root", lambda: root)
    built: list[str] = []
    try:
        first_messages: list[str] = []
        built.append(ensure_image(docker_client, progress=first_messages.append))
        again: list[str] = []
        assert ensure_image(docker_client, progress=again.append) == built[0]
        assert again == []  # no build step, no download, nothing

        # The fault planner runs on the host only: editing it reuses the image as it is.
        (root / "nemesis" / "plan.py").write_text((root / "nemesis" / "plan.py").read_text() + "# edited\n")
        planner_edited: list[str] = []
        built.append(ensure_image(docker_client, progress=planner_edited.append))  # removed even if new
        assert built[-1] == built[0]
        assert planner_edited == []

        (root / "nemesis" / "lazyfs" / "marker.txt").write_text("changed\n")
        changed: list[str] = []
        built.append(ensure_image(docker_client, progress=changed.append))
        assert built[-1] != built[0]
        assert any(message.startswith("building") for message in changed)
        assert (
            run_in_image(docker_client, built[-1], f"cat {IMAGE_APP_DIR}/nemesis/lazyfs/marker.txt")
            == "changed\n"
        )
    finally:
        for tag in dict.fromkeys(built):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(tag)


def tiny_image(client: docker.DockerClient, reference: str) -> None:
    """Import a one-file image under ``reference``: a distinct image id in milliseconds."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("version")
        info.size = len(reference)
        tar.addfile(info, io.BytesIO(reference.encode()))
    repository, _, tag = reference.partition(":")
    client.api.import_image_from_data(archive.getvalue(), repository=repository, tag=tag)


@pytest.mark.docker
def test_prune_removes_old_tags_but_keeps_the_current_one_and_those_in_use(
    docker_client: docker.DockerClient,
) -> None:
    repository = (
        f"tidemark-prune-test-{uuid.uuid4().hex[:8]}"  # not the real repository: other sessions use that
    )
    references = [f"{repository}:{version}" for version in ("current", "old", "in-use")]
    for reference in references:
        tiny_image(docker_client, reference)
    container = docker_client.containers.create(references[2], ["true"], labels={"tidemark": "1"})
    try:
        assert prune_images(docker_client, keep=references[0], repository=repository) == [references[1]]
        assert sorted(tag for image in docker_client.images.list(name=repository) for tag in image.tags) == [
            references[0],
            references[2],
        ]
    finally:
        container.remove(force=True)
        for reference in references:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(reference)
