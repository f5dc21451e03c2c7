# The Tidemark node image: one image for the controller and every broker.
#
# Build it with `tidemark image build`. That command needs no registry: it builds a Debian bookworm
# root filesystem with mmdebstrap, imports it as the base, and assembles the build context this file
# expects (`wheels/`: the Python wheels and their `requirements.txt`; `app/`: the node-side programs
# only, `broker_impl/` and `nemesis/lazyfs/`, as listed by CODE_DIRECTORIES in testbed/cluster/image.py;
# the fault planner, checker and harness stay on the host). With a registry, `tidemark image build
# --base-image python:3.11-slim-bookworm` uses the default base below instead; then the apt-get step
# fetches the missing system packages.
#
# Nothing in the build or in a running container needs the network when the base comes from
# `tidemark image build`: system packages are in the base and Python packages come from the wheels
# the host downloaded, installed with `pip --no-index`.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# System packages (the registry-free base already holds all of them, so apt-get, and the network,
# is used only on a registry base that lacks some), then sshd: no host keys in the image (each
# container makes its own at start, so every node has a distinct key the harness verifies), key-only
# root login, no DNS lookups of clients. /etc/mtab as a symlink keeps fusermount3 quiet; libfaketime
# (its thread-safe build) gets an architecture-free path (the clock-skew fault preloads it: testbed/cluster/fake_clock.py).
RUN set -eu; \
    missing=""; \
    for package in iproute2 iptables procps fuse3 openssh-server openssh-sftp-server tini libfaketime; do \
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || missing="$missing $package"; \
    done; \
    python3 -c 'import ensurepip, venv' 2>/dev/null || missing="$missing python3 python3-venv"; \
    if [ -n "$missing" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    rm -f /etc/ssh/ssh_host_*; \
    mkdir -p /root/.ssh /run/sshd; \
    chmod 700 /root/.ssh; \
    printf '%s\n' \
        'HostKey /etc/ssh/ssh_host_ed25519_key' \
        'PermitRootLogin prohibit-password' \
        'PasswordAuthentication no' \
        'KbdInteractiveAuthentication no' \
        'UseDNS no' \
        > /etc/ssh/sshd_config.d/tidemark.conf; \
    ln -sf /proc/self/mounts /etc/mtab; \
    ln -sf "$(dpkg -L libfaketime | grep '/libfaketimeMT\.so\.1$')" /usr/local/lib/tidemark-faketime.so

# Python packages from the host-prepared wheelhouse, into a venv (Debian's python refuses system-wide
# pip installs). A .pth file puts /opt/tidemark/app on the path, so `/opt/tidemark/venv/bin/python -m
# broker_impl ...` works from any shell, including an SSH session that does not see ENV below.
COPY wheels/ /opt/tidemark/wheels/
RUN set -eu; \
    python3 -m venv /opt/tidemark/venv; \
    /opt/tidemark/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
        --find-links /opt/tidemark/wheels --requirement /opt/tidemark/wheels/requirements.txt; \
    rm -rf /opt/tidemark/wheels; \
    site_packages="$(/opt/tidemark/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
    echo /opt/tidemark/app > "$site_packages/tidemark-app.pth"

ENV PATH=/opt/tidemark/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# tini is PID 1 and reaps the zombies of the daemons the harness starts and kills. The command makes a
# host key on first start, starts sshd (which writes /run/sshd.pid once it listens: the harness waits
# for that file) and then only keeps the container up; the harness starts controller and broker
# daemons through a Remote.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["/bin/sh", "-c", "set -e; mkdir -p /run/sshd; [ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key; rm -f /run/sshd.pid; /usr/sbin/sshd; exec sleep infinity"]

# The code changes most often, so it comes last and in one layer: a rebuild after a code change
# reuses every layer above. `app/` holds `broker_impl/` and `nemesis/lazyfs/` (no `nemesis/__init__.py`:
# `nemesis` is a namespace package here, so `python -m nemesis.lazyfs` works).
COPY app/ /opt/tidemark/app/
