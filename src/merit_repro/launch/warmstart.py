"""A warm trainer: one process that has imported torch forks a ready trainer for each CPU cell.

A fresh ``python -m merit_repro.train`` spends seconds before its first step on a CPU (importing
torch, then the ``torch._dynamo`` import that torch's optimizers trigger), which is more than a demo
cell trains. So the workflow's launcher (merit_repro.launch) asks a warm server
to fork a trainer instead. The forked child is the same program with the same arguments,
environment, working directory, umask, resource limits and stdout/stderr as a fresh one; every
result is the same (each cell seeds its own RNGs), and the workflow keeps one job, one cell, one
set of outputs.

- The server is started by the first launcher that finds none, in its own session, and exits
  after ``MERIT_WARM_START_IDLE`` seconds (default 120) without a request. Its socket lives in a
  private folder of the user's temp dir and is named after the interpreter and the package's
  source files, so code changes start a new server.
- The launcher passes its stdout/stderr to the child over the socket, forwards SIGTERM/SIGINT
  to it (and outlives them once it has ended: merit_repro.launch.signals), and returns its exit
  code. If the launcher dies (Snakemake killed), the child sees the connection close and stops
  as on SIGTERM: it checkpoints and exits, so a rerun resumes.
- The child takes the launcher's umask and resource limits (``ulimit``) too; when it cannot (a limit
  above the server's hard limit), it declines and the launcher starts a fresh process.
- Used for CPU cells only, and not under SLURM (a server started inside one job would die with
  it): GPU cells start in seconds anyway and spend hours training. ``MERIT_WARM_START=0``
  turns it off; any failure to reach a server falls back to a fresh process.
"""

import fcntl
import hashlib
import json
import os
import resource
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from merit_repro.utils import current_umask

from . import signals

IDLE_SECONDS = float(os.environ.get("MERIT_WARM_START_IDLE", "120"))
START_TIMEOUT_SECONDS = 60
MAX_MESSAGE = 1 << 20
MAX_FOLDER_CHARS = 80


def enabled(gpus):
    return gpus == 0 and os.environ.get("MERIT_WARM_START", "1") != "0" and "SLURM_JOB_ID" not in os.environ


def socket_path():
    """One server per interpreter and version of the package's code."""
    package = Path(__file__).resolve().parents[1]   # merit_repro/
    digest = hashlib.sha256(sys.executable.encode())
    for source in sorted(package.rglob("*.py")):
        digest.update(f"{source}:{source.stat().st_mtime_ns}".encode())
    folder = Path(tempfile.gettempdir()) / f"merit-repro-{os.getuid()}"
    if len(str(folder)) > MAX_FOLDER_CHARS:   # a socket's path must fit in 107 bytes
        folder = Path("/tmp") / f"merit-repro-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.lstat()   # not stat(): a symlink planted there must not lead us into someone else's folder
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a private folder of this user")
    return folder / f"trainer-{digest.hexdigest()[:16]}.sock"


# ---------------------------------------------------------------- messages: 4-byte length + JSON


def send(sock, obj, fds=()):
    data = json.dumps(obj).encode()
    header = struct.pack("!I", len(data))
    if fds:
        socket.send_fds(sock, [header + data], list(fds))
    else:
        sock.sendall(header + data)


def _recv_exact(sock, n):
    chunks = b""
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return chunks


def receive(sock, max_fds=0):
    """(message, fds); (None, []) when the peer closed the connection."""
    if max_fds:
        data, fds, _, _ = socket.recv_fds(sock, 4 + MAX_MESSAGE, max_fds)
        if not data:
            return None, []
        length = struct.unpack("!I", data[:4])[0]
        rest = _recv_exact(sock, 4 + length - len(data)) if len(data) < 4 + length else b""
        return json.loads(data[4:] + rest), fds
    header = _recv_exact(sock, 4)
    if header is None:
        return None, []
    body = _recv_exact(sock, struct.unpack("!I", header)[0])
    return (json.loads(body) if body is not None else None), []


# ---------------------------------------------------------------- the client (the launcher)


def _connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        return sock
    except OSError:
        sock.close()
        return None


def connect():
    """A connection to a running server, starting one if needed; None when none can be had."""
    path = socket_path()
    sock = _connect(path)
    if sock:
        return sock
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # one launcher starts the server, the others wait for it
        sock = _connect(path)
        if sock:
            return sock
        path.unlink(missing_ok=True)        # a stale socket of a server that died
        server = subprocess.Popen([sys.executable, "-m", "merit_repro.launch.warmstart", str(path)], start_new_session=True,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline and server.poll() is None:
            sock = _connect(path)
            if sock:
                return sock
            time.sleep(0.05)
    return None


def run_train(argv, env, stdout=1, stderr=2, started=None, declined=None):
    """Run ``python -m merit_repro.train *argv`` in a forked warm trainer; its exit code, or None when no
    server could be reached or it declined (then run it the ordinary way; declined(reason) says why).
    started(pid) is called once it runs."""
    declined = declined or (lambda reason: None)
    try:
        sock = connect()
    except OSError as err:
        declined(str(err))
        return None
    if sock is None:
        declined("none could be started")
        return None
    with sock:
        try:
            sock.settimeout(START_TIMEOUT_SECONDS)
            send(sock, {"argv": list(argv), "env": dict(env), "cwd": os.getcwd(), **process_limits()},
                 fds=(stdout, stderr))
            hello, _ = receive(sock)
        except OSError as err:
            declined(str(err))
            return None
        if not hello or "pid" not in hello:   # declined: it could not be this process's exact twin
            declined((hello or {}).get("declined", "it closed the connection"))
            return None
        sock.settimeout(None)
        pid = hello["pid"]
        if started:
            started(pid)
        with signals.passed_on(lambda signum: os.kill(pid, signum)):
            finished, _ = receive(sock)
        return finished["exit_code"] if finished else 128 + signal.SIGKILL   # the child was killed


# ---------------------------------------------------------------- the same process, forked


def process_limits():
    """What a fresh process inherits besides its environment: the umask and every resource limit."""
    names = {}
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        names.setdefault(getattr(resource, name), name)   # one name per limit (RLIMIT_OFILE is RLIMIT_NOFILE)
    limits = {name: list(resource.getrlimit(which)) for which, name in names.items()}
    return {"umask": current_umask(), "rlimits": limits}


def adopt_limits(request):
    """Take the launcher's umask and resource limits; the reason it cannot be done (a limit above this
    process's hard limit), or None."""
    os.umask(request["umask"])
    for name, (soft, hard) in request["rlimits"].items():
        which = getattr(resource, name, None)
        if which is None:
            return f"{name} is unknown here"
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as err:
            return f"{name} {soft, hard}: {err}"
    return None


# ---------------------------------------------------------------- the server


def _child(conn, request, fds):
    """In the forked child: become the requested trainer, report its exit code, exit."""
    os.setsid()
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    declined = adopt_limits(request)
    if declined:   # the launcher starts a fresh process instead
        send(conn, {"declined": declined})
        os._exit(0)
    import torch

    torch.set_num_threads(max(1, int(request["env"].get("OMP_NUM_THREADS", "1"))))
    send(conn, {"pid": os.getpid()})

    def watch():   # the launcher went away: stop as a scheduler would, with a checkpoint
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=watch, daemon=True).start()

    from merit_repro.train import loop

    sys.argv = ["python -m merit_repro.train", *request["argv"]]
    try:
        code = loop.main(request["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        send(conn, {"exit_code": code})
    except OSError:
        pass
    os._exit(code)


def serve(path):
    import torch

    torch.set_num_threads(1)   # no OpenMP pool in the parent: children set their own thread counts
    import torch._dynamo  # noqa: F401  (what a trainer would import first thing)

    from merit_repro.train import loop  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = Path(f"{path}.{os.getpid()}")
    server.bind(str(tmp))
    server.listen(64)
    os.replace(tmp, path)   # clients only ever see a socket that is listening
    inode = path.stat().st_ino
    server.settimeout(IDLE_SECONDS)
    while True:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            if server.gettimeout() != IDLE_SECONDS:
                return   # idle, unlinked, and no late client left in the backlog
            try:   # stop being found, then serve whoever connected in the meantime
                if path.stat().st_ino == inode:
                    path.unlink()
            except FileNotFoundError:
                pass
            server.settimeout(0.5)
            continue
        with conn:
            conn.settimeout(10)
            try:
                request, fds = receive(conn, max_fds=2)
            except (OSError, ValueError):
                continue
            conn.settimeout(None)
            if request is None or len(fds) != 2:
                continue
            if os.fork() == 0:
                server.close()
                _child(conn, request, fds)
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
