"""Client-side discovery: SRV records from a real (tiny, in-process) DNS server on
loopback, resolv.conf parsing, and UDP announcements broadcast on loopback."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest
from pftp_client.discovery import (
    SrvTarget,
    campus_domains,
    discover_coordinators,
    listen_for_announcements,
    order_srv,
    srv_coordinators,
    srv_url,
)
from pftp_wire.models import Announcement


class TinyDns:
    """An authoritative-only DNS server over UDP on 127.0.0.1, answering from a dict."""

    def __init__(self, zone: dict[tuple[str, str], list[str]]) -> None:
        self.zone = {
            (name.lower().rstrip(".") + ".", rtype): v for (name, rtype), v in zone.items()
        }
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.queries: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            query = dns.message.from_wire(data)
            response = dns.message.make_response(query)
            response.flags |= dns.flags.AA
            for q in query.question:
                name = q.name.to_text().lower()
                rtype = dns.rdatatype.to_text(q.rdtype)
                self.queries.append(f"{name} {rtype}")
                texts = self.zone.get((name, rtype))
                if texts:
                    response.answer.append(dns.rrset.from_text(q.name, 60, "IN", rtype, *texts))
                elif not any(n == name for n, _ in self.zone):
                    response.set_rcode(dns.rcode.NXDOMAIN)
            self.sock.sendto(response.to_wire(), addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def campus_dns() -> Iterator[TinyDns]:
    server = TinyDns(
        {
            ("_pftp._tcp.campus.example", "SRV"): [
                "20 0 8470 backup.campus.example.",
                "10 5 8470 primary-a.campus.example.",
                "10 0 8470 primary-b.campus.example.",
            ],
            ("_pftp._tcp.tls.example", "SRV"): ["0 0 443 pftp.tls.example."],
            ("_pftp._tcp.none.example", "SRV"): ["0 0 0 ."],
        }
    )
    yield server
    server.close()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_order_srv_priority_then_weight() -> None:
    recs = [
        SrvTarget(20, 0, 1, "c."),
        SrvTarget(10, 0, 1, "b."),
        SrvTarget(10, 100, 1, "a."),
        SrvTarget(5, 0, 1, "."),  # "service not available here"
    ]
    for seed in range(20):
        got = [r.target for r in order_srv(recs, random.Random(seed))]
        # weight 0 after any positive weight in the same priority
        assert got == ["a.", "b.", "c."]


def test_order_srv_weights_spread_the_first_pick() -> None:
    recs = [SrvTarget(1, 90, 1, "heavy."), SrvTarget(1, 10, 1, "light.")]
    rng = random.Random(7)
    firsts = [order_srv(recs, rng)[0].target for _ in range(400)]
    assert set(firsts) == {"heavy.", "light."}
    assert firsts.count("heavy.") > firsts.count("light.")
    assert all(len(order_srv(recs, rng)) == 2 for _ in range(10))


def test_srv_url() -> None:
    assert (
        srv_url(SrvTarget(0, 0, 8470, "pftp.campus.example.")) == "http://pftp.campus.example:8470"
    )
    assert srv_url(SrvTarget(0, 0, 443, "pftp.campus.example.")) == "https://pftp.campus.example"
    assert srv_url(SrvTarget(0, 0, 80, "2001:db8::1")) == "http://[2001:db8::1]:80"


def test_campus_domains_from_resolv_conf(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text(
        "# generated\nnameserver 10.0.0.53\ndomain cs.campus.example\n"
        "search campus.example. lab.campus.example  # trailing comment\noptions ndots:1\n"
    )
    assert campus_domains(conf) == ["campus.example", "lab.campus.example", "cs.campus.example"]
    assert campus_domains(tmp_path / "missing") == []


def test_srv_lookup_against_real_dns(campus_dns: TinyDns) -> None:
    urls = srv_coordinators(
        ["campus.example", "tls.example", "none.example", "nothing.example"],
        nameservers=["127.0.0.1"],
        dns_port=campus_dns.port,
        rng=random.Random(1),
    )
    assert urls == [
        "http://primary-a.campus.example:8470",
        "http://primary-b.campus.example:8470",
        "http://backup.campus.example:8470",
        "https://pftp.tls.example",
    ]
    assert "_pftp._tcp.campus.example. SRV" in campus_dns.queries


def test_discover_configured_first_then_srv_without_listening(
    campus_dns: TinyDns, tmp_path: Path
) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("search campus.example\n")
    urls = discover_coordinators(
        ["http://explicit:8470/", "http://primary-a.campus.example:8470"],
        resolv_conf=conf,
        nameservers=["127.0.0.1"],
        dns_port=campus_dns.port,
        announce_port=free_udp_port(),
        rng=random.Random(1),
    )
    assert urls == [
        "http://explicit:8470",
        "http://primary-a.campus.example:8470",
        "http://primary-b.campus.example:8470",
        "http://backup.campus.example:8470",
    ]


def test_dns_down_is_not_fatal(tmp_path: Path) -> None:
    urls = srv_coordinators(
        ["campus.example"], nameservers=["127.0.0.1"], dns_port=free_udp_port(), timeout=0.5
    )
    assert urls == []


def _broadcast(port: int, anns: list[Announcement], rounds: int, stop: threading.Event) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        for _ in range(rounds):
            if stop.is_set():
                return
            for a in anns:
                s.sendto(a.model_dump_json().encode(), ("127.255.255.255", port))
            time.sleep(0.1)


def test_listens_for_announcements_when_nothing_else_is_known(
    campus_dns: TinyDns, tmp_path: Path
) -> None:
    port = free_udp_port()
    anns = [
        Announcement(url="http://backup:8470", priority=20, interval_s=0.1),
        Announcement(url="http://primary:8470", priority=10, interval_s=0.1),
    ]
    stop = threading.Event()
    sender = threading.Thread(target=_broadcast, args=(port, anns, 200, stop), daemon=True)
    sender.start()
    try:
        urls = discover_coordinators(
            [],
            domain="nothing.example",  # NXDOMAIN: falls through to the broadcast
            nameservers=["127.0.0.1"],
            dns_port=campus_dns.port,
            listen_s=15.0,
            announce_port=port,
        )
    finally:
        stop.set()
        sender.join(5)
    assert urls[0] == "http://primary:8470"
    assert set(urls) <= {"http://primary:8470", "http://backup:8470"}


def test_listen_ignores_junk_and_times_out() -> None:
    port = free_udp_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)

        def junk() -> None:
            time.sleep(0.2)
            s.sendto(b"hello", ("127.255.255.255", port))

        t = threading.Thread(target=junk)
        t.start()
        assert listen_for_announcements(1.0, port=port) == []
        t.join()
