import os, signal
for _ in range(12):
    pid = os.posix_spawn("/bin/true", ["true"], os.environ)
    fd = os.pidfd_open(pid)
    signal.pidfd_send_signal(fd, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(fd)
