"""rediss:// with a real TLS redis-server that requires client certificates: a CA, a server and
a client certificate made here with the openssl command; the daemon (Sidekiq's ssl_params in
the config file), queued.Client and queuedctl (the same options as URL query arguments) all
connect with them, and a client without a certificate is refused."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import redis
import yaml

import jobs
import queued
from conftest import IN_CI, RedisServer, find_redis_server
from ctlrun import ctl_json
from harness import Daemon, counts, wait_for


def openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder) -> None:
    """ca.crt; server.crt/.key for 127.0.0.1; client.crt/.key: all signed by the CA."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", "-new", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=queued test CA", cwd=folder)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")):
        (folder / f"{name}.ext").write_text(ext)
        openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN=queued test {name}", cwd=folder)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                "-extfile", f"{name}.ext", cwd=folder)


@pytest.fixture
def tls_redis(tmp_path):
    binary = find_redis_server()
    if binary is None or shutil.which("openssl") is None:
        if IN_CI:
            pytest.fail("redis-server or openssl not installed; CI must install them")
        pytest.skip("redis-server or openssl not installed")
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certificates(certs)
    # (not RedisServer.start: it waits on a plain-text port, and this server has none)
    server = RedisServer(binary)
    port = server.port
    server.proc = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(certs / "server.crt"), "--tls-key-file", str(certs / "server.key"),
         "--tls-ca-cert-file", str(certs / "ca.crt"), "--tls-auth-clients", "yes",
         "--dir", server.dir, "--save", "", "--appendonly", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = (f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs / 'ca.crt'}"
           f"&ssl_certfile={certs / 'client.crt'}&ssl_keyfile={certs / 'client.key'}"
           "&ssl_cert_reqs=required")
    probe = redis.Redis.from_url(url, socket_timeout=1)

    def up() -> bool:
        try:
            return probe.ping()
        except redis.ConnectionError:
            assert server.proc.poll() is None, "the TLS redis-server exited"
            return False
    wait_for(up, 10, what="the TLS redis-server")
    probe.close()
    yield port, certs, url
    server.stop()


def test_daemon_client_and_queuedctl_over_tls_with_a_client_certificate(tls_redis, tmp_path):
    port, certs, url = tls_redis
    # Given a daemon whose config gives Sidekiq's ssl_params (CA, client certificate and key)
    config = tmp_path / "sidekiq.yml"
    config.write_text(yaml.safe_dump({
        "concurrency": 2, "heartbeat_interval": 0.5,
        "require": [os.path.join(os.path.dirname(os.path.dirname(__file__)), "jobs.py")],
        ":redis": {"url": f"rediss://127.0.0.1:{port}/0", "ssl_params": {
            "ca_file": str(certs / "ca.crt"), "cert": str(certs / "client.crt"),
            "key": str(certs / "client.key"), "verify_mode": "required"}}}))
    d = Daemon(url, tmp_path, args=("-C", str(config))).start()
    try:
        # When a producer with the same options in its URL pushes jobs
        producer = queued.Client(url=url)
        jids = producer.push_bulk({"class": "Record", "args": [[i] for i in range(200)]})
        # Then each runs once (its own writes go over TLS too, through get_redis())
        check = redis.Redis.from_url(url)
        wait_for(lambda: check.hlen(jobs.DONE) == 200, 20, what="every job")
        assert counts(check, jobs.DONE) == {jid: 1 for jid in jids}
        # And queuedctl reads the stats over TLS
        wait_for(lambda: ctl_json("stats", url=url)["processed"] == 200, 10,
                 what="queuedctl to count every job")
        # And a client with the CA but no certificate of its own is refused by the server
        bare = redis.Redis.from_url(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs="
                                    f"{certs / 'ca.crt'}&ssl_cert_reqs=required",
                                    socket_timeout=2)
        with pytest.raises(redis.ConnectionError):
            bare.ping()
        assert d.stop() == 0
    finally:
        d.cleanup()
