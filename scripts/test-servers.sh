#!/usr/bin/env bash
# Starts and stops the servers the remote byte-source tests read from: nginx serving a folder
# over HTTP (range requests, keep-alive, sendfile), Ceph's RADOS Gateway (radosgw, with one
# monitor and one in-memory OSD) as an S3 endpoint that checks SigV4 signatures, and Azurite (azurite-blob) as an Azure Blob Storage endpoint that checks
# Shared Key signatures and SAS tokens. All listen on 127.0.0.1 on free ports; nothing else is
# contacted (Azurite's telemetry is off).
#
#   scripts/test-servers.sh start DATA_DIR STATE_DIR
#   scripts/test-servers.sh stop STATE_DIR
#
# `start` writes STATE_DIR/env (the WDS_TEST_* variables below) and STATE_DIR/pids; STATE_DIR
# also holds the nginx config and the servers' logs. `stop` ends exactly the processes listed
# in STATE_DIR/pids (TERM, then KILL after a grace period); it is safe to call twice or after a
# `start` that failed halfway. A `start` that fails stops what it had started itself.
#
# scripts/test.sh uses it like this:
#
#   state=$(mktemp -d)
#   trap 'scripts/test-servers.sh stop "$state"' EXIT   # first, so a failed start is cleaned up
#   scripts/test-servers.sh start "$shards_dir" "$state"
#   source "$state/env"
#   (cd build && ctest --output-on-failure)
#
# The env file exports WDS_TEST_HTTP (http://127.0.0.1:PORT, serving DATA_DIR), the same over
# TLS as WDS_TEST_HTTPS (HTTP/1.1) and WDS_TEST_HTTPS2 (HTTP/2 offered), WDS_TEST_CA (the CA
# that signed their certificate), WDS_TEST_HTTP_LOG (nginx's access log), WDS_TEST_BIG_FILE
# (8 MB at random, which nginx serves as /big/body.bin),
# WDS_TEST_S3_ENDPOINT, WDS_TEST_S3_BUCKET (wds-test: DATA_DIR's files under "shards/", and
# "many/obj-0000.txt".."many/obj-1004.txt" so that a listing takes two pages),
# WDS_TEST_AWS_ACCESS_KEY_ID, WDS_TEST_AWS_SECRET_ACCESS_KEY (the key of the bucket's owner,
# made at random by each start; any other key or an unsigned request gets 403;
# "public/<first shard>" is also readable unsigned, as a public-read object),
# WDS_TEST_AZURE_ENDPOINT
# (http://127.0.0.1:PORT/devstoreaccount1), WDS_TEST_AZURE_ACCOUNT and WDS_TEST_AZURE_KEY
# (Azurite's well-known development account), WDS_TEST_AZURE_CONTAINER (wds-test: DATA_DIR's
# files under "shards/"), WDS_TEST_AZURE_PUBLIC_CONTAINER (wds-public: the same, readable
# without credentials), WDS_TEST_AZURE_SAS (an account SAS token: read, write, list, create;
# valid for a day) and WDS_TEST_DATA (DATA_DIR). Without radosgw or Azurite installed their
# variables are left out and their tests skip. WDS_TEST_SERVERS="s3" (or "azure", or "") starts
# only those besides nginx, for benchmarks; WDS_RGW_MEMSTORE_BYTES bounds what RGW may hold.
set -euo pipefail

# Proxy variables would send loopback requests (curl, boto3) elsewhere.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export no_proxy='127.0.0.1,localhost' NO_PROXY='127.0.0.1,localhost'
# boto3 is always given keys; this keeps it from ever asking an instance metadata service.
export AWS_EC2_METADATA_DISABLED=true

usage() {
  echo "usage: $0 start DATA_DIR STATE_DIR | stop STATE_DIR" >&2
  exit 2
}

die() {
  echo "test-servers: error: $*" >&2
  exit 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# True while PID runs; a zombie (exited, not yet reaped by a parent that may never reap it)
# counts as gone.
alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$state" != Z ]
}

# True if PID is still one of the servers of STATE_DIR (both are started with a file in it on
# their command line), so that a reused pid is never signalled.
ours() {
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2/"
}

# Prints the HTTP status of URL, or 000 when nothing answers.
http_status() {
  curl -s -o /dev/null --noproxy '*' --max-time 2 -w '%{http_code}' "$1" || true
}

stop_servers() {
  local state_dir pids=() pid left i sig
  [ -f "$1/pids" ] || return 0
  state_dir=$(cd "$1" && pwd -P) # as start wrote it into the servers' command lines
  while read -r pid; do
    [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && ours "$pid" "$state_dir" && pids+=("$pid")
  done <"$state_dir/pids"
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for sig in KILL none; do
      # Up to 5 s for each step: TERM's grace period, then the wait after KILL.
      for ((i = 0; i < 50; i++)); do
        left=()
        for pid in "${pids[@]}"; do alive "$pid" && left+=("$pid"); done
        [ ${#left[@]} -eq 0 ] && break 2
        sleep 0.1
      done
      [ "$sig" = none ] && die "processes ${left[*]} survived SIGKILL"
      echo "test-servers: ${left[*]} ignored SIGTERM; sending SIGKILL" >&2
      kill -KILL "${left[@]}" 2>/dev/null || true
      pids=("${left[@]}")
    done
  fi
  # The pids are gone; forgetting them keeps a second stop from signalling a reused pid.
  rm -f "$state_dir/pids" "$state_dir/env"
}

# Waits until URL answers with any HTTP status while PID lives; bounded to about 30 s.
wait_for() {
  local url=$1 pid=$2 i
  for ((i = 0; i < 300; i++)); do
    alive "$pid" || return 1
    [ "$(http_status "$url")" != 000 ] && return 0
    sleep 0.1
  done
  return 1
}

# A throwaway CA and a certificate for 127.0.0.1, so HTTPS is tested with verification on.
make_tls() {
  local dir=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=wds-test-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.pem" >/dev/null 2>&1
}

start_nginx() {
  local data_dir=$1 state_dir=$2 attempt port tls_port h2_port pid
  mkdir -p "$state_dir/nginx-tmp"
  make_tls "$state_dir"
  # A body larger than a read of curl's, served beside the data but not uploaded anywhere.
  mkdir -p "$state_dir/big"
  head -c 8000000 /dev/urandom >"$state_dir/big/body.bin"
  # A free port can be taken between the probe and nginx's bind: try a few.
  for attempt in 1 2 3; do
    port=$(free_port)
    tls_port=$(free_port)
    h2_port=$(free_port)
    # master_process off: one process, so the recorded pid is the whole server and a KILL
    # leaves no orphaned worker. It runs as the user who starts it.
    cat >"$state_dir/nginx.conf" <<EOF
daemon off;
master_process off;
pid $state_dir/nginx.pid;
error_log $state_dir/nginx-error.log warn;
events {
  worker_connections 1024;
}
http {
  access_log $state_dir/nginx-access.log;
  client_body_temp_path $state_dir/nginx-tmp/body;
  proxy_temp_path $state_dir/nginx-tmp/proxy;
  fastcgi_temp_path $state_dir/nginx-tmp/fastcgi;
  uwsgi_temp_path $state_dir/nginx-tmp/uwsgi;
  scgi_temp_path $state_dir/nginx-tmp/scgi;
  types {
    application/x-tar tar;
    text/plain txt;
  }
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 60s;
  keepalive_requests 10000;
  server {
    listen 127.0.0.1:$port;
    listen 127.0.0.1:$tls_port ssl;
    listen 127.0.0.1:$h2_port ssl http2;  # as GCS and the Hub's CDN answer
    ssl_certificate $state_dir/server.pem;
    ssl_certificate_key $state_dir/server.key;
    server_name localhost;
    root $data_dir;
    location / {
    }
    location /big/ {
      root $state_dir;
    }
    # What start polls for, so that waiting leaves no error in the log.
    location = /.test-servers-ready {
      access_log off;
      return 204;
    }
  }
}
EOF
    # -e: the error log before the config is read, else nginx tries /var/log/nginx.
    nginx -p "$state_dir" -c "$state_dir/nginx.conf" -e "$state_dir/nginx-error.log" \
      </dev/null >>"$state_dir/nginx-stdout.log" 2>&1 &
    pid=$!
    echo "$pid" >>"$state_dir/pids"
    if wait_for "http://127.0.0.1:$port/.test-servers-ready" "$pid"; then
      NGINX_PORT=$port
      NGINX_TLS_PORT=$tls_port
      NGINX_H2_PORT=$h2_port
      return 0
    fi
    echo "test-servers: nginx did not start on port $port (attempt $attempt)" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  tail -n 20 "$state_dir/nginx-error.log" >&2 || true
  die "nginx did not start; see $state_dir/nginx-error.log"
}

# Ceph's RADOS Gateway, the S3 server of a real object store: one monitor, one OSD keeping its
# objects in memory (memstore: nothing but logs touches the disk), and radosgw's beast frontend,
# all on 127.0.0.1 without cephx. What matters (found trying it on Debian 12): the monitor needs
# a map made by monmaptool (else it binds its default ports and never joins); `ms mon client
# mode = crc` (the default "secure" needs cephx); a short paxos propose interval (else ~14 s to
# start); tcp_nodelay on the frontend (else keep-alive GETs stall 40 ms). Memory grows with what
# is stored (about twice the bytes), up to WDS_RGW_MEMSTORE_BYTES (default 1 GiB).
# Sets RGW_PORT, and RGW_KEY_ID/RGW_SECRET: the keys of a user made here (random per start).
start_rgw() {
  local state_dir=$1 dir=$1/ceph attempt mon_port port fsid pid_mon pid_osd pid_rgw i
  fsid=$(cat /proc/sys/kernel/random/uuid)
  RGW_KEY_ID=WDS$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
  RGW_SECRET=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
  for attempt in 1 2 3; do
    rm -rf "$dir"
    mkdir -p "$dir/run" "$dir/log" "$dir/mon/mon.a" "$dir/osd/osd.0" "$dir/rgw/client.rgw"
    mon_port=$(free_port)
    port=$(free_port)
    cat >"$dir/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms mon service mode = crc
ms cluster mode = crc
ms service mode = crc
ms client mode = crc
ms bind msgr1 = false
public addr = 127.0.0.1
cluster addr = 127.0.0.1
osd objectstore = memstore
memstore device bytes = ${WDS_RGW_MEMSTORE_BYTES:-1073741824}
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
paxos propose interval = 0.05
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
pid file = $dir/run/\$name.pid
mon data = $dir/mon/\$name
osd data = $dir/osd/\$name
rgw data = $dir/rgw/\$name
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$port tcp_nodelay=1
CONF
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" \
      >>"$dir/log/setup.log" 2>&1 || die "monmaptool failed; see $dir/log/setup.log"
    ceph-mon -c "$dir/ceph.conf" -i a --mkfs --monmap "$dir/monmap" >>"$dir/log/setup.log" 2>&1 ||
      die "ceph-mon --mkfs failed; see $dir/log/setup.log"
    # -f: in the foreground, so that the pid recorded is the daemon's own.
    ceph-mon -f -c "$dir/ceph.conf" -i a </dev/null >>"$dir/log/stdout.log" 2>&1 &
    pid_mon=$!
    echo "$pid_mon" >>"$state_dir/pids"
    if ! ceph -c "$dir/ceph.conf" --connect-timeout 10 osd create >>"$dir/log/setup.log" 2>&1; then
      echo "test-servers: ceph-mon did not answer on port $mon_port (attempt $attempt)" >&2
      kill -KILL "$pid_mon" 2>/dev/null || true
      continue
    fi
    ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs >>"$dir/log/setup.log" 2>&1 ||
      die "ceph-osd --mkfs failed; see $dir/log/setup.log"
    ceph-osd -f -c "$dir/ceph.conf" -i 0 </dev/null >>"$dir/log/stdout.log" 2>&1 &
    pid_osd=$!
    echo "$pid_osd" >>"$state_dir/pids"
    radosgw -f -c "$dir/ceph.conf" -n client.rgw </dev/null >>"$dir/log/stdout.log" 2>&1 &
    pid_rgw=$!
    echo "$pid_rgw" >>"$state_dir/pids"
    # radosgw answers once it has made its pools on the OSD.
    if wait_for "http://127.0.0.1:$port/" "$pid_rgw"; then
      for ((i = 0; i < 50; i++)); do
        if radosgw-admin -c "$dir/ceph.conf" user create --uid=wds-test --display-name=wds-test \
          --access-key="$RGW_KEY_ID" --secret-key="$RGW_SECRET" >>"$dir/log/setup.log" 2>&1; then
          RGW_PORT=$port
          return 0
        fi
        sleep 0.2
      done
      die "radosgw-admin could not create the test user; see $dir/log/setup.log"
    fi
    echo "test-servers: radosgw did not start on port $port (attempt $attempt)" >&2
    kill -KILL "$pid_rgw" "$pid_osd" "$pid_mon" 2>/dev/null || true
  done
  tail -n 20 "$dir/log/client.rgw.log" >&2 || true
  die "radosgw did not start; see $dir/log/"
}

# Creates the bucket wds-test and uploads the objects through the S3 API, signed with SigV4
# written here with Python's standard library, independently of the library's own signing.
setup_s3() {
  python3 - "$1" "$2" "$RGW_KEY_ID" "$RGW_SECRET" <<'PY'
import datetime
import hashlib
import hmac
import os
import sys
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

endpoint, data_dir, key_id, secret = sys.argv[1:5]
bucket = "wds-test"
host = urllib.parse.urlparse(endpoint).netloc


def quote(s, safe):
    return urllib.parse.quote(s, safe=safe)


def request(method, path, body=b"", headers=None, query=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    h = {k.lower(): v for k, v in (headers or {}).items()}
    h.update(host=host, **{"x-amz-date": date,
                           "x-amz-content-sha256": hashlib.sha256(body).hexdigest()})
    names = sorted(h)
    qs = "&".join(f"{quote(k, '-_.~')}={quote(v, '-_.~')}" for k, v in sorted(query))
    canonical = "\n".join([method, quote(path, "/-_.~"), qs,
                           "".join(f"{n}:{h[n].strip()}\n" for n in names), ";".join(names),
                           h["x-amz-content-sha256"]])
    scope = f"{day}/us-east-1/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, "us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    h["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                          f"SignedHeaders={';'.join(names)}, Signature={signature}")
    del h["host"]
    url = endpoint + quote(path, "/-_.~") + ("?" + qs if qs else "")
    req = urllib.request.Request(url, data=body if method == "PUT" else None, method=method,
                                 headers=h)
    with urllib.request.urlopen(req) as r:
        return r.read()


def put_file(path, key, headers=None):
    with open(path, "rb") as f:
        request("PUT", f"/{bucket}/{key}", f.read(), headers)


names = [os.path.relpath(os.path.join(root, f), data_dir)
         for root, _, files in os.walk(data_dir) for f in files]
request("PUT", f"/{bucket}")
with ThreadPoolExecutor(16) as pool:
    jobs = [pool.submit(put_file, os.path.join(data_dir, n), "shards/" + n) for n in names]
    jobs += [pool.submit(request, "PUT", f"/{bucket}/many/obj-{i:04d}.txt", f"{i}\n".encode())
             for i in range(1005)]
    # One object anyone may read, for anonymous access.
    first = min(n for n in names if n.endswith(".tar"))
    jobs.append(pool.submit(put_file, os.path.join(data_dir, first), "public/" + first,
                            {"x-amz-acl": "public-read"}))
    for j in jobs:
        j.result()

# Concurrent puts into one bucket: check that the server kept them all (ListObjectsV2 pages).
count, token = 0, None
while True:
    page = request("GET", f"/{bucket}", query=[("list-type", "2")] +
                   ([("continuation-token", token)] if token else [])).decode()
    count += page.count("<Key>")
    if "<IsTruncated>true</IsTruncated>" not in page:
        break
    token = page.split("<NextContinuationToken>")[1].split("</NextContinuationToken>")[0]
if count != len(names) + 1006:
    sys.exit(f"test-servers: error: bucket holds {count} objects, expected {len(names) + 1006}")
PY
}

# Azurite's Blob service alone, its data in STATE_DIR/azurite, emptied first: a start after a
# stop begins with no containers, as the S3 server does.
start_azurite() {
  local state_dir=$1 attempt port pid
  rm -rf "$state_dir/azurite"
  mkdir -p "$state_dir/azurite"
  for attempt in 1 2 3; do
    port=$(free_port)
    azurite-blob --blobHost 127.0.0.1 --blobPort "$port" --location "$state_dir/azurite" \
      --disableTelemetry --silent </dev/null >>"$state_dir/azurite.log" 2>&1 &
    pid=$!
    echo "$pid" >>"$state_dir/pids"
    if wait_for "http://127.0.0.1:$port/devstoreaccount1?comp=list" "$pid"; then
      AZURITE_PORT=$port
      return 0
    fi
    echo "test-servers: azurite-blob did not start on port $port (attempt $attempt)" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  tail -n 20 "$state_dir/azurite.log" >&2 || true
  die "azurite-blob did not start; see $state_dir/azurite.log"
}

# Azurite's well-known development account (published by Microsoft; it guards nothing).
AZURE_ACCOUNT=devstoreaccount1
AZURE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

# Creates the containers wds-test (private) and wds-public (blobs readable by anyone), uploads
# DATA_DIR's files under "shards/" to both, and prints an account SAS token. Requests are signed
# with Shared Key here, independently of the library's own signing.
setup_azure() {
  python3 - "$1" "$2" "$AZURE_ACCOUNT" "$AZURE_KEY" <<'PY'
import base64
import datetime
import hashlib
import hmac
import os
import sys
import urllib.parse
import urllib.request

endpoint, data_dir, account, key = sys.argv[1:5]
version = "2021-08-06"
base_path = urllib.parse.urlparse(endpoint).path


def request(method, path, query=(), headers=None, body=b""):
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    headers["x-ms-version"] = version
    headers["x-ms-date"] = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%a, %d %b %Y %H:%M:%S GMT")
    headers["content-type"] = headers.get("content-type", "application/octet-stream")
    standard = ["content-encoding", "content-language", "content-length", "content-md5",
                "content-type", "date", "if-modified-since", "if-match", "if-none-match",
                "if-unmodified-since", "range"]
    values = dict(headers, **{"content-length": str(len(body)) if body else ""})
    url_path = urllib.parse.quote(base_path + path)
    string_to_sign = (method + "\n" + "".join(values.get(h, "") + "\n" for h in standard) +
                      "".join(f"{k}:{v}\n" for k, v in sorted(headers.items())
                              if k.startswith("x-ms-")) +
                      f"/{account}{url_path}" +
                      "".join(f"\n{k}:{v}" for k, v in sorted(query)))
    mac = hmac.new(base64.b64decode(key), string_to_sign.encode(), hashlib.sha256).digest()
    headers["authorization"] = f"SharedKey {account}:{base64.b64encode(mac).decode()}"
    url = endpoint.rstrip("/") + urllib.parse.quote(path)
    if query:
        url += "?" + urllib.parse.urlencode(list(query))
    req = urllib.request.Request(url, data=body if method == "PUT" else None, method=method,
                                 headers=headers)
    with urllib.request.urlopen(req) as r:
        return r.read()


names = sorted(os.path.relpath(os.path.join(root, f), data_dir)
               for root, _, files in os.walk(data_dir) for f in files)
for container, public in (("wds-test", False), ("wds-public", True)):
    request("PUT", f"/{container}", [("restype", "container")],
            {"x-ms-blob-public-access": "blob"} if public else {})
    for n in names:
        with open(os.path.join(data_dir, n), "rb") as f:
            request("PUT", f"/{container}/shards/{n}", (), {"x-ms-blob-type": "BlockBlob"},
                    f.read())

# An account SAS (version 2019-12-12): blobs, all resource types, read/write/list/create.
expiry = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).strftime(
    "%Y-%m-%dT%H:%M:%SZ")
fields = dict(sv="2019-12-12", ss="b", srt="sco", sp="rwlc", se=expiry, spr="https,http")
string_to_sign = "\n".join([account, fields["sp"], fields["ss"], fields["srt"], "",
                            fields["se"], "", fields["spr"], fields["sv"]]) + "\n"
fields["sig"] = base64.b64encode(hmac.new(base64.b64decode(key), string_to_sign.encode(),
                                          hashlib.sha256).digest()).decode()
print(urllib.parse.urlencode(fields))
PY
}

on_start_exit() {
  local status=$?
  if [ "$status" -ne 0 ]; then stop_servers "$state_dir" || true; fi
  exit "$status"
}

start_servers() {
  local data_dir bad pid sas
  [ -d "$1" ] || die "$1: not a directory"
  data_dir=$(cd "$1" && pwd -P)
  mkdir -p "$2"
  state_dir=$(cd "$2" && pwd -P) # global: the EXIT trap below uses it
  if [ -f "$state_dir/pids" ]; then
    while read -r pid; do
      [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && ours "$pid" "$state_dir" &&
        die "servers of $state_dir are running (pid $pid); run: $0 stop $state_dir"
    done <"$state_dir/pids"
  fi
  # Plain names only, so that a test's URL for a file is the same in every client and server
  bad=$(cd "$data_dir" && find . ! -type d | sed 's|^\./||' |
    grep -Ev '^[A-Za-z0-9._~/-]+$' | head -n 1) || true
  [ -z "$bad" ] || die "$data_dir/$bad: only letters, digits and ._~/- in file names"
  command -v nginx >/dev/null || die "nginx is not installed (Debian package nginx-light or nginx)"
  # Ceph's radosgw comes from Debian (scripts/setup-deps.sh): without it only nginx starts and
  # the S3 tests skip, except under CI (CI=true), where they must run.
  # WDS_TEST_SERVERS (benchmarks): which of s3 and azure to start besides nginx; default both.
  local with_s3=1
  if [[ " ${WDS_TEST_SERVERS-s3 azure} " != *" s3 "* ]]; then
    with_s3=0
  elif ! command -v radosgw >/dev/null || ! command -v ceph-osd >/dev/null; then
    [ "${CI:-}" = true ] && die "radosgw or ceph-osd is not installed (Debian: radosgw ceph-mon ceph-osd ceph-common)"
    echo "test-servers: WARNING: no radosgw: the S3 tests will skip" \
      "(to run them: apt-get install radosgw ceph-mon ceph-osd ceph-common)" >&2
    with_s3=0
  fi
  # Azurite comes from npm (scripts/setup-deps.sh); like radosgw it is required under CI only.
  local with_azure=1
  if [[ " ${WDS_TEST_SERVERS-s3 azure} " != *" azure "* ]]; then
    with_azure=0
  elif ! command -v azurite-blob >/dev/null; then
    [ "${CI:-}" = true ] && die "azurite-blob is not installed (npm install -g azurite)"
    echo "test-servers: WARNING: no azurite-blob: the Azure tests will skip" \
      "(to run them: npm install -g azurite)" >&2
    with_azure=0
  fi

  rm -f "$state_dir/pids" "$state_dir/env"
  : >"$state_dir/pids"
  # From here on a failure stops whatever this start had started.
  trap on_start_exit EXIT

  start_nginx "$data_dir" "$state_dir"
  if [ "$with_s3" = 1 ]; then
    start_rgw "$state_dir"
    setup_s3 "http://127.0.0.1:$RGW_PORT" "$data_dir" ||
      die "S3 setup failed; see $state_dir/ceph/log/client.rgw.log"
  fi
  if [ "$with_azure" = 1 ]; then
    start_azurite "$state_dir"
    sas=$(setup_azure "http://127.0.0.1:$AZURITE_PORT/$AZURE_ACCOUNT" "$data_dir") ||
      die "Azure setup failed; see $state_dir/azurite.log"
  fi

  # Written last and renamed, so an env file always means both servers are ready.
  {
    echo "export WDS_TEST_HTTP=http://127.0.0.1:$NGINX_PORT"
    echo "export WDS_TEST_HTTPS=https://127.0.0.1:$NGINX_TLS_PORT"
    echo "export WDS_TEST_HTTPS2=https://127.0.0.1:$NGINX_H2_PORT"
    echo "export WDS_TEST_HTTP_LOG=$(printf %q "$state_dir/nginx-access.log")"
    echo "export WDS_TEST_BIG_FILE=$(printf %q "$state_dir/big/body.bin")"
    echo "export WDS_TEST_CA=$(printf %q "$state_dir/ca.pem")"
    if [ "$with_s3" = 1 ]; then
      echo "export WDS_TEST_S3_ENDPOINT=http://127.0.0.1:$RGW_PORT"
      echo "export WDS_TEST_S3_BUCKET=wds-test"
      echo "export WDS_TEST_AWS_ACCESS_KEY_ID=$RGW_KEY_ID"
      echo "export WDS_TEST_AWS_SECRET_ACCESS_KEY=$RGW_SECRET"
    fi
    if [ "$with_azure" = 1 ]; then
      echo "export WDS_TEST_AZURE_ENDPOINT=http://127.0.0.1:$AZURITE_PORT/$AZURE_ACCOUNT"
      echo "export WDS_TEST_AZURE_ACCOUNT=$AZURE_ACCOUNT"
      echo "export WDS_TEST_AZURE_KEY=$(printf '%q' "$AZURE_KEY")"
      echo "export WDS_TEST_AZURE_CONTAINER=wds-test"
      echo "export WDS_TEST_AZURE_PUBLIC_CONTAINER=wds-public"
      echo "export WDS_TEST_AZURE_SAS=$(printf '%q' "$sas")"
    fi
    echo "export WDS_TEST_DATA=$(printf '%q' "$data_dir")"
  } >"$state_dir/env.tmp"
  mv "$state_dir/env.tmp" "$state_dir/env"
  echo "test-servers: http on 127.0.0.1:$NGINX_PORT, s3 on" \
    "$([ "$with_s3" = 1 ] && echo "127.0.0.1:$RGW_PORT" || echo "none"), azure on" \
    "$([ "$with_azure" = 1 ] && echo "127.0.0.1:$AZURITE_PORT" || echo "none");" \
    "source $state_dir/env"
}

case "${1:-}" in
  start)
    [ $# -eq 3 ] || usage
    start_servers "$2" "$3"
    ;;
  stop)
    [ $# -eq 2 ] || usage
    stop_servers "$2"
    ;;
  *) usage ;;
esac
