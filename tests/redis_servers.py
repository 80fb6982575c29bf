"""Throwaway ``redis-server`` processes for tests: standalone, password, TLS and a 3-node cluster.

Every server listens on 127.0.0.1 on a free port, keeps its files in its own temp dir and never
persists (``--save "" --appendonly no``), so tests never touch a Redis they did not start.
Readiness is polled with raw RESP over a socket (optionally TLS) against a deadline, so nothing
depends on redis-py or on redis-cli's TLS support.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

HOST = "127.0.0.1"
START_TIMEOUT = 10.0


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def missing_binaries_reason(cluster: bool = False) -> str | None:
    """Why Redis-backed tests cannot run here, or ``None`` when they can."""
    if redis_server_binary() is None:
        return "redis-server is not on PATH (install redis-server to run the Redis tests)"
    if cluster and shutil.which("redis-cli") is None:
        return "redis-cli is not on PATH (needed to form a Redis Cluster)"
    return None


def free_port() -> int:
    """A port that was free a moment ago. Callers must tolerate losing the race (the servers
    below retry on a clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


# -- minimal RESP client (readiness probes only) ---------------------------------------------


def _encode(args: Sequence[str]) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _read_reply(f: Any) -> bytes | int | None:
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return bytes(body)
    if kind == b"-":
        raise RespError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None
        data = f.read(n + 2)
        return bytes(data[:-2])
    raise ConnectionError(f"unexpected RESP reply {line!r}")


class RespError(Exception):
    """An error reply (``-ERR ...``) from the server."""


def resp_command(
    port: int,
    *args: str,
    password: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    timeout: float = 1.0,
) -> bytes | int | None:
    """Send one command (after AUTH when ``password`` is set) and return its reply."""
    with socket.create_connection((HOST, port), timeout=timeout) as raw:
        sock: socket.socket = raw
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(raw, server_hostname=HOST)
        with sock, sock.makefile("rb") as f:
            if password is not None:
                sock.sendall(_encode(["AUTH", password]))
                _read_reply(f)
            sock.sendall(_encode(list(args)))
            return _read_reply(f)


# -- TLS material ----------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_tls_material(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it.

    Returns ``(ca_cert, server_cert, server_key)``. EC keys keep generation fast. The
    extensions are explicit because Python's ``ssl`` (OpenSSL 3) rejects CA certificates
    without proper key usage under strict verification.
    """
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=cachekit test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost",
        cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


_tls_material: list[tuple[Path, Path, Path]] = []


def shared_tls_material() -> tuple[Path, Path, Path]:
    """:func:`make_tls_material` made once per process (a few openssl runs cost ~0.2 s) and
    removed at exit."""
    if not _tls_material:
        directory = Path(tempfile.mkdtemp(prefix="cachekit-tls-"))
        atexit.register(shutil.rmtree, directory, True)
        _tls_material.append(make_tls_material(directory))
    return _tls_material[0]


_tls_reason: list[str | None] = []


def tls_unavailable_reason() -> str | None:
    """Why a TLS server cannot be started here (``None`` when it can). Probed once, by really
    starting one: whether redis-server was built with TLS is not visible from ``--version``."""
    if _tls_reason:
        return _tls_reason[0]
    reason = missing_binaries_reason()
    if reason is None and shutil.which("openssl") is None:
        reason = "openssl is not on PATH (needed to make a throwaway TLS certificate)"
    if reason is None:
        probe = RedisServer(tls=True)
        try:
            probe.start()
        except Exception as e:  # any failure means "no TLS here"; the reason says which
            reason = f"redis-server could not start with TLS: {e}"
        finally:
            probe.stop()
    _tls_reason.append(reason)
    return reason


# -- servers ---------------------------------------------------------------------------------

_live: weakref.WeakSet[RedisServer] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    # A script or session that dies on an exception must not leave servers running.
    for server in list(_live):
        server.stop()


class RedisServer:
    """One ``redis-server`` child process.

    ``port=None`` picks a free port (and picks again if another process wins the race).
    ``stop()`` is a graceful SIGTERM and removes the temp dir; ``kill()`` is SIGKILL and keeps
    it so ``restart()`` can bring the server back on the same port; ``pause()`` / ``resume()``
    (SIGSTOP/SIGCONT) make a server that accepts connections but never answers.
    """

    def __init__(
        self,
        port: int | None = None,
        password: str | None = None,
        tls: bool | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self._fixed_port = port is not None
        self.port = port if port is not None else 0
        self.password = password
        self.tls = bool(tls)
        self.extra_args = tuple(extra_args)
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.ca_cert: Path | None = None
        self._cert: Path | None = None
        self._key: Path | None = None

    # -- addresses --

    @property
    def url(self) -> str:
        scheme = "rediss" if self.tls else "redis"
        auth = f":{quote(self.password, safe='')}@" if self.password is not None else ""
        return f"{scheme}://{auth}{HOST}:{self.port}/0"

    @property
    def client_kwargs(self) -> dict[str, Any]:
        """Extra redis-py keyword arguments a client needs (the CA for TLS)."""
        if not self.tls:
            return {}
        return {"ssl_ca_certs": str(self.ca_cert), "ssl_cert_reqs": "required"}

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        return ssl.create_default_context(cafile=str(self.ca_cert))

    @property
    def log_file(self) -> Path | None:
        return self.dir / "redis.log" if self.dir else None

    def log_tail(self, n: int = 2000) -> str:
        path = self.log_file
        if path is None or not path.exists():
            return ""
        return path.read_text(errors="replace")[-n:]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- lifecycle --

    def _ensure_dir(self) -> Path:
        if self.dir is None or not self.dir.exists():
            self.dir = Path(tempfile.mkdtemp(prefix="cachekit-redis-"))
            if self.tls:
                self.ca_cert, self._cert, self._key = shared_tls_material()
        return self.dir

    def _args(self) -> list[str]:
        d = self._ensure_dir()
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError(missing_binaries_reason() or "redis-server not found")
        args = [
            binary,
            "--bind", HOST,
            "--dir", str(d),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(d / "redis.log"),
            # SIGTERM is acted on from the server cron; at the default hz (10) every stop()
            # costs up to 100 ms, which adds up over function-scoped servers.
            "--hz", "100",
        ]  # fmt: skip
        if self.tls:
            args += [
                "--port", "0",
                "--tls-port", str(self.port),
                "--tls-cert-file", str(self._cert),
                "--tls-key-file", str(self._key),
                "--tls-ca-cert-file", str(self.ca_cert),
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        else:
            args += ["--port", str(self.port)]
        if self.password is not None:
            args += ["--requirepass", self.password]
        return args + list(self.extra_args)

    def start(self, deadline: float | None = None) -> RedisServer:
        if self.running:
            return self
        end = deadline if deadline is not None else time.monotonic() + START_TIMEOUT
        while True:
            if not self._fixed_port:
                self.port = free_port()
            self.proc = subprocess.Popen(
                self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            _live.add(self)
            try:
                self.wait_ready(end)
                return self
            except _ExitedEarly as e:
                clash = "address already in use" in str(e).lower()
                if clash and not self._fixed_port and time.monotonic() < end:
                    continue
                raise RuntimeError(f"redis-server failed to start: {e}") from None

    def wait_ready(self, deadline: float) -> None:
        """Poll PING until the server answers or ``deadline`` (``time.monotonic()``) passes."""
        ctx = self.ssl_context()
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise _ExitedEarly((err + "\n" + self.log_tail()).strip())
            try:
                reply = resp_command(self.port, "PING", password=self.password, ssl_context=ctx)
                if reply == b"PONG":
                    return
            except (OSError, ConnectionError, RespError) as e:
                last = e
            time.sleep(0.01)  # polling interval, not a wait for a condition
        self._terminate(signal.SIGKILL)
        raise TimeoutError(f"redis-server on port {self.port} not ready: {last}\n{self.log_tail()}")

    def _terminate(self, sig: signal.Signals, timeout: float = 5.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a paused server cannot handle SIGTERM
                proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        if proc.stderr is not None:
            proc.stderr.close()

    def kill(self) -> None:
        """SIGKILL: the server vanishes without closing anything gracefully."""
        self._terminate(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted by the kernel but nothing is answered."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self, deadline: float | None = None) -> RedisServer:
        """Stop if running and start again on the same port (and with the same certificates)."""
        self._terminate(signal.SIGTERM)
        fixed, self._fixed_port = self._fixed_port, True
        try:
            return self.start(deadline)
        finally:
            self._fixed_port = fixed

    def stop(self) -> None:
        """SIGTERM, wait for exit, remove the temp dir. Safe to call more than once."""
        self._terminate(signal.SIGTERM)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ExitedEarly(Exception):
    pass


class RedisCluster:
    """``n`` master-only cluster nodes (no replicas) joined with ``redis-cli --cluster create``."""

    def __init__(self, n: int = 3, node_timeout_ms: int = 2000) -> None:
        if n < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.n = n
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        return f"redis+cluster://{HOST}:{self.nodes[0].port}"

    def start(self, deadline: float | None = None) -> RedisCluster:
        end = deadline if deadline is not None else time.monotonic() + 4 * START_TIMEOUT
        try:
            for _ in range(self.n):
                # The cluster bus listens on port + 10000, so pick ports where that fits too;
                # a clash there makes the node exit and start() choose again.
                port = _cluster_port()
                node = RedisServer(
                    port=port,
                    extra_args=(
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", str(self.node_timeout_ms),
                    ),
                )  # fmt: skip
                self.nodes.append(node)
                _start_cluster_node(node, end)
            cli = shutil.which("redis-cli")
            if cli is None:
                raise RuntimeError(missing_binaries_reason(cluster=True) or "no redis-cli")
            create = subprocess.run(
                [cli, "--cluster", "create", *(f"{HOST}:{p}" for p in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                timeout=max(1.0, end - time.monotonic()),
            )  # fmt: skip
            if create.returncode != 0:
                raise RuntimeError(
                    "redis-cli --cluster create failed:\n"
                    + create.stdout.decode(errors="replace")
                    + create.stderr.decode(errors="replace")
                )
            self.wait_ok(end)
            return self
        except BaseException:
            self.stop()
            raise

    def wait_ok(self, deadline: float) -> None:
        """Poll CLUSTER INFO until every node reports a healthy cluster that knows all nodes
        and all 16384 slots (clients bootstrap from any node, so all must agree)."""
        want = ("cluster_state:ok", "cluster_slots_assigned:16384", f"cluster_known_nodes:{self.n}")
        last = ""
        while time.monotonic() < deadline:
            try:
                infos = [str(resp_command(p, "CLUSTER", "INFO")) for p in self.ports]
                if all(all(w in info for w in want) for info in infos):
                    return
                last = infos[-1]
            except (OSError, ConnectionError, RespError) as e:
                last = str(e)
            time.sleep(0.02)  # polling interval
        raise TimeoutError(f"cluster did not reach cluster_state:ok: {last}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cluster_port() -> int:
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((HOST, port + 10000))
        except OSError:
            continue
        return port


def _start_cluster_node(node: RedisServer, deadline: float) -> None:
    # Ports are fixed per node (the bus port must be checked too), so a lost race is retried
    # here with a fresh pair instead of inside RedisServer.start().
    while True:
        try:
            node.start(deadline)
            return
        except RuntimeError as e:
            if "address already in use" not in str(e).lower() or time.monotonic() >= deadline:
                raise
            node.port = _cluster_port()
