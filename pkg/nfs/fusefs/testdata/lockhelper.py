# A process that takes fcntl and flock locks for the lock tests: one
# command per line on stdin, one answer line on stdout ("ok", "err ENAME",
# "lock TYPE START LEN PID" for getlk, "pid N"). A SIGALRM set by a
# command's last argument interrupts it (no SA_RESTART: Python's handlers
# interrupt system calls, and this one raises so the call is not retried).
import errno
import fcntl
import os
import signal
import struct
import sys


class Alarm(Exception):
    pass


def on_alarm(sig, frame):
    raise Alarm()


signal.signal(signal.SIGALRM, on_alarm)
TYPES = {"r": fcntl.F_RDLCK, "w": fcntl.F_WRLCK, "u": fcntl.F_UNLCK}
NAMES = {v: k for k, v in TYPES.items()}
FLOCK = "hh4xqqi4x"  # struct flock on Linux x86_64 and arm64: 32 bytes


def out(s):
    sys.stdout.write(s + "\n")
    sys.stdout.flush()


fd = None
for line in sys.stdin:
    a = line.split()
    if not a:
        continue
    try:
        if a[0] == "open":
            fd = os.open(a[1], os.O_RDWR | os.O_CREAT, 0o644)
        elif a[0] in ("setlk", "setlkw", "getlk", "ofdsetlk", "ofdsetlkw", "ofdgetlk"):
            cmd = {"setlk": fcntl.F_SETLK, "setlkw": fcntl.F_SETLKW, "getlk": fcntl.F_GETLK,
                   # open file description locks (Linux F_OFD_*)
                   "ofdsetlk": 37, "ofdsetlkw": 38, "ofdgetlk": 36}[a[0]]
            buf = struct.pack(FLOCK, TYPES[a[1]], 0, int(a[2]), int(a[3]), 0)
            if len(a) > 4:
                signal.alarm(int(a[4]))
            try:
                r = fcntl.fcntl(fd, cmd, buf)
            finally:
                signal.alarm(0)
            if a[0].endswith("getlk"):
                t, _, start, n, pid = struct.unpack(FLOCK, r)
                out("lock %s %d %d %d" % (NAMES[t], start, n, pid))
                continue
        elif a[0] == "flock":
            op = {"sh": fcntl.LOCK_SH, "ex": fcntl.LOCK_EX, "un": fcntl.LOCK_UN}[a[1]]
            rest = a[2:]
            if "nb" in rest:
                op |= fcntl.LOCK_NB
                rest.remove("nb")
            if rest:
                signal.alarm(int(rest[0]))
            try:
                fcntl.flock(fd, op)
            finally:
                signal.alarm(0)
        elif a[0] == "close":
            os.close(fd)
            fd = None
        elif a[0] == "pid":
            out("pid %d" % os.getpid())
            continue
        elif a[0] == "exit":
            out("ok")
            break
        else:
            out("err EINVAL")
            continue
        out("ok")
    except Alarm:
        out("err EINTR")
    except OSError as e:
        out("err " + errno.errorcode.get(e.errno, str(e.errno)))
