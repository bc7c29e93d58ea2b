#!/usr/bin/python3 -S
"""Python for the test suites without importing torch each time: a fork server and its client.

Every test script imports torch (and most torchvision), which costs about 1.5 s of CPU, and the
unit tests run some 50 of them: a minute of each CI run spent on imports. The server imports
them once; each script then runs in a forked copy of it, as a fresh interpreter would run it.

    fork_server.py --serve SOCKET     (the real python3) import torch & co., serve on SOCKET
    fork_server.py SCRIPT ARGS...     the client, as `python3 SCRIPT ARGS...`
    fork_server.py -c CODE ARGS...    the client, as `python3 -c CODE ARGS...`

tests/run_all.sh starts the server and points $PYTHON (which the tests run their scripts with)
at this file. The client sends its arguments, working folder, environment and its stdin, stdout
and stderr (the descriptors themselves) to the server, which forks; the child runs the script
with them as `__main__` and exits with the script's status, which the client exits with. A
client that dies (a test's timeout) takes its script with it: the server kills the child's
process group when the connection closes. Without a server (MPICNN_PYTHON_SERVER unset or not
answering), for any other form of command line, or with an environment that differs from the
server's in what a process reads as it starts (OPENBLAS_CORETYPE, GLIBC_TUNABLES, OMP_*, ...:
startup_env), the client runs the real interpreter ($MPICNN_PYTHON_REAL, default
/usr/bin/python3) instead: the same result, only slower.
"""
import os
import socket
import struct
import sys

REAL = os.environ.get("MPICNN_PYTHON_REAL") or "/usr/bin/python3"
RUN_IT_YOURSELF = -1000  # the server's answer to a request it cannot serve as asked


def send_msg(sock, data):
    sock.sendall(struct.pack("<I", len(data)) + data)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def recv_msg(sock):
    (n,) = struct.unpack("<I", recv_exact(sock, 4))
    return recv_exact(sock, n)


# ---- client -----------------------------------------------------------------------------------

def client(argv):
    import json
    path = os.environ.get("MPICNN_PYTHON_SERVER", "")
    supported = argv and (argv[0] == "-c" and len(argv) >= 2 or not argv[0].startswith("-"))
    sock = None
    if path and supported:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
        except OSError:
            sock = None
    if sock is not None:
        try:  # a closed stdin (or any failure to hand over) leaves it to python3 itself
            socket.send_fds(sock, [b"F"], [0, 1, 2])
            send_msg(sock, json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode())
        except OSError:
            sock.close()
            sock = None
    if sock is None:
        os.execv(REAL, [REAL] + argv)
    try:
        (status,) = struct.unpack("<i", recv_exact(sock, 4))
    except (EOFError, OSError):
        sys.stderr.write("fork_server.py: the server closed the connection before the script ended\n")
        sys.exit(1)
    if status == RUN_IT_YOURSELF:
        sock.close()
        os.execv(REAL, [REAL] + argv)
    sys.exit(status)


# ---- server -----------------------------------------------------------------------------------

def startup_env(env):
    """The variables a process reads as it starts (the loader, glibc, libgomp, OpenBLAS, Python
    itself): a fork keeps the server's, so a request that sets others runs in a python3 of its
    own. OMP_NUM_THREADS is the exception: torch.set_num_threads applies it in the fork."""
    prefixes = ("LD_", "GLIBC_", "MALLOC_", "PYTHON", "OMP_", "GOMP_", "KMP_", "OPENBLAS_", "MKL_")
    return {k: v for k, v in env.items()
            if k.startswith(prefixes) and k not in ("OMP_NUM_THREADS", "PYTHON")}  # PYTHON: ours


def run_child(argv, cwd, env, default_threads):
    """In the forked child: become `python3 ARGV` in CWD with ENV, and return its exit status."""
    import atexit
    import random
    import traceback
    import numpy
    import torch
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # What a fresh interpreter would have: its own random seeds, and torch's thread count from
    # OMP_NUM_THREADS as it reads it at start.
    random.seed()
    numpy.random.seed()
    threads = int(env.get("OMP_NUM_THREADS", "0") or 0) or default_threads
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    status = 0
    try:
        if argv[0] == "-c":
            sys.argv = ["-c"] + argv[2:]
            sys.path[0] = ""
            import __main__
            code = compile(argv[1], "<string>", "exec")
            exec(code, {"__name__": "__main__", "__builtins__": __main__.__builtins__})
        else:
            import runpy
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code
        else:
            sys.stderr.write(str(e.code) + "\n")
            status = 1
    except BaseException as e:
        # The traceback as python3 prints it: from the script's frames on, not the server's.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        status = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    return status


def handle(listener, conn, default_threads):
    import json
    import select
    import signal
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        req = json.loads(recv_msg(conn))
    except (EOFError, OSError, ValueError):
        conn.close()
        return
    if startup_env(req["env"]) != startup_env(os.environ):
        for fd in fds:
            os.close(fd)
        conn.sendall(struct.pack("<i", RUN_IT_YOURSELF))
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setpgid(0, 0)
            listener.close()
            conn.close()
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            status = run_child(req["argv"], req["cwd"], req["env"], default_threads)
        finally:
            os._exit(status & 0xFF if status >= 0 else 1)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([conn, pidfd], [], [])
            if pidfd in ready:
                break
            if conn in ready:  # the client died (or sent more than it should): stop the script
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
                break
        _, wstatus = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(wstatus)
        conn.sendall(struct.pack("<i", code if code >= 0 else 128 - code))
    except OSError:
        pass
    finally:
        os.close(pidfd)
        conn.close()


def serve(path):
    # What the server and its forks import, before any fork: a module first imported by one
    # thread while another forks could leave its import lock held in the child. Then what the
    # test scripts import, once (no torch operation runs here: libgomp's threads must not exist
    # when the server forks).
    import atexit, json, random, runpy, select, signal, threading, traceback  # noqa: F401,E401
    import numpy  # noqa: F401
    import PIL.Image  # noqa: F401
    import torch
    import torchvision  # noqa: F401
    import torchvision.models  # noqa: F401
    import torchvision.models.detection  # noqa: F401
    import torchvision.ops  # noqa: F401
    import torchvision.transforms  # noqa: F401
    default_threads = torch.get_num_threads()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.unlink(tmp)
    listener.bind(tmp)
    listener.listen(64)
    os.rename(tmp, path)  # clients find the socket only once it listens
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(listener, conn, default_threads), daemon=True).start()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        client(sys.argv[1:])
