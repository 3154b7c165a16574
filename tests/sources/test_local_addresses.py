"""This host's addresses from /proc/net, without psutil: the same set psutil lists, on this machine and on
a captured multi-interface host."""

from __future__ import annotations

import socket

from verltop.sources.local import local_addresses, proc_net_addresses

FIB_TRIE = """\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.0.0.0/8 2 0 2
        |-- 10.1.2.3
           /32 host LOCAL
           /8 link UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     |-- 172.17.0.1
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.1.2.3
        /32 host LOCAL
"""

IF_INET6 = """\
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000002 04 40 00 82     eth0
"""


def test_proc_net_matches_psutil_here():
    psutil = __import__("psutil")
    want = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)}
    got = proc_net_addresses()
    assert got is not None and got == want
    assert want <= local_addresses()


def test_proc_net_reads_local_host_entries_only(tmp_path):
    (tmp_path / "fib_trie").write_text(FIB_TRIE)
    (tmp_path / "if_inet6").write_text(IF_INET6)
    got = proc_net_addresses(str(tmp_path))
    # host LOCAL /32 only: not the 127.0.0.0/8 route, the broadcast address or the default route
    assert got == {"10.1.2.3", "127.0.0.1", "172.17.0.1", "fe80::fc:ff:fe00:1", "::1", "fd00::2"}


def test_no_proc_net_is_none_and_ipv6_is_optional(tmp_path):
    assert proc_net_addresses(str(tmp_path)) is None
    (tmp_path / "fib_trie").write_text(FIB_TRIE)
    assert proc_net_addresses(str(tmp_path)) == {"10.1.2.3", "127.0.0.1", "172.17.0.1"}
