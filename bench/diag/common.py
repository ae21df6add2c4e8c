"""Helpers for the bench/diag scripts: talk to a sandboxed replica by its
directory (DIR/mysql.sock, DIR/mysqld.pid) with the mariadb client."""
import os
import subprocess
import time


class Replica:
    def __init__(self, d):
        self.sock = os.path.join(d, "mysql.sock")
        self.pidfile = os.path.join(d, "mysqld.pid")

    def q(self, sql):
        return subprocess.run(["mariadb", "-S", self.sock, "-uroot", "-N", "-B", "-e", sql], capture_output=True, text=True).stdout

    def pid(self):
        return open(self.pidfile).read().strip()

    def lagging(self):
        st = subprocess.run(["mariadb", "-S", self.sock, "-uroot", "-e", "SHOW SLAVE STATUS\\G"], capture_output=True, text=True).stdout
        sbm = [l.split(":", 1)[1].strip() for l in st.splitlines() if "Seconds_Behind_Master" in l]
        return bool(sbm) and sbm[0].isdigit() and int(sbm[0]) > 0

    def wait_lagging(self):
        """Wait for a catch-up to begin (the replica restarts between rounds)."""
        while True:
            try:
                if self.lagging():
                    return
            except Exception:
                pass
            time.sleep(0.05)

    def thread_names(self):
        names = {}
        for l in self.q("SELECT THREAD_OS_ID, NAME FROM performance_schema.threads").splitlines():
            f = l.split("\t")
            if f[0] != "NULL":
                names[f[0]] = f[1].replace("thread/", "")
        return names


def cpu_seconds(stat_path):
    """utime + stime of a process or thread, from its /proc .../stat file."""
    st = open(stat_path).read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def prefetching():
    return bool(subprocess.run(["pgrep", "-f", "pileup prefetch"], capture_output=True, text=True).stdout.strip())
