#!/usr/bin/env bash
# Starts and stops the servers the remote byte-source tests read from: nginx serving a folder
# over HTTP (range requests, keep-alive, sendfile), moto_server as an S3 endpoint that checks
# SigV4 signatures, and Azurite (azurite-blob) as an Azure Blob Storage endpoint that checks
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
# The env file exports WDS_TEST_HTTP (http://127.0.0.1:PORT, serving DATA_DIR),
# WDS_TEST_S3_ENDPOINT, WDS_TEST_S3_BUCKET (wds-test: DATA_DIR's files under "shards/", and
# "many/obj-0000.txt".."many/obj-1004.txt" so that a listing takes two pages),
# WDS_TEST_AWS_ACCESS_KEY_ID, WDS_TEST_AWS_SECRET_ACCESS_KEY (an IAM user's key that may do
# anything; any other key or an unsigned request gets 403; "public/<first shard>" is also
# readable unsigned, as a public-read object), WDS_TEST_AZURE_ENDPOINT
# (http://127.0.0.1:PORT/devstoreaccount1), WDS_TEST_AZURE_ACCOUNT and WDS_TEST_AZURE_KEY
# (Azurite's well-known development account), WDS_TEST_AZURE_CONTAINER (wds-test: DATA_DIR's
# files under "shards/"), WDS_TEST_AZURE_PUBLIC_CONTAINER (wds-public: the same, readable
# without credentials), WDS_TEST_AZURE_SAS (an account SAS token: read, write, list, create;
# valid for a day) and WDS_TEST_DATA (DATA_DIR). Without moto or Azurite installed their
# variables are left out and their tests skip.
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
  local data_dir=$1 state_dir=$2 attempt port tls_port pid
  mkdir -p "$state_dir/nginx-tmp"
  make_tls "$state_dir"
  # A free port can be taken between the probe and nginx's bind: try a few.
  for attempt in 1 2 3; do
    port=$(free_port)
    tls_port=$(free_port)
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
    ssl_certificate $state_dir/server.pem;
    ssl_certificate_key $state_dir/server.key;
    server_name localhost;
    root $data_dir;
    location / {
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
      return 0
    fi
    echo "test-servers: nginx did not start on port $port (attempt $attempt)" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  tail -n 20 "$state_dir/nginx-error.log" >&2 || true
  die "nginx did not start; see $state_dir/nginx-error.log"
}

# moto_server, with two fixes to its SigV4 check of S3 requests:
# - moto rebuilds the canonical request from werkzeug's URL, in which "%2F" in the query is
#   decoded and "+", "=" in the path are left raw, so correctly signed requests such as
#   ListObjectsV2 with prefix=shards/ or a key with "+" fail with SignatureDoesNotMatch. The fix
#   re-encodes path and query as SigV4 says (RFC 3986 unreserved characters kept, and "/" in
#   the path).
# - a request without an Authorization header fails with a KeyError: a 500 for bucket requests
#   (a 403 with no body for objects). It gets S3's 403 AccessDenied instead, except a GET or
#   HEAD of an object that exists: moto has already checked that its ACL lets anyone read it
#   (public-read), as S3 does for anonymous requests.
# A wrong key or secret still gets 403 (InvalidAccessKeyId, SignatureDoesNotMatch).
write_moto_launcher() {
  cat >"$1/moto_server.py" <<'PY'
import sys
from urllib.parse import quote, unquote

from moto.iam.access_control import S3IAMRequest
from moto.server import main

_init = S3IAMRequest.__init__
_create_aws_request = S3IAMRequest._create_aws_request


def _public_object(account_id, method, path):
    from moto.s3.models import s3_backends

    bucket, _, key = unquote(path.partition("?")[0]).lstrip("/").partition("/")
    if method not in ("GET", "HEAD") or not key:
        return False
    try:
        obj = s3_backends[account_id]["aws"].get_object(bucket, key)
    except Exception:
        return False
    return obj is not None and obj.acl is not None and obj.acl.public_read


def _init_denying_unsigned(self, account_id, method, path, data, body, headers, action):
    self._anonymous_read = False
    if "Authorization" not in headers:
        if _public_object(account_id, method, path):
            self._anonymous_read = True
            return
        self._data = data
        self._raise_access_denied()
    _init(self, account_id, method, path, data, body, headers, action)


_check_signature = S3IAMRequest.check_signature
_check_action_permitted = S3IAMRequest.check_action_permitted


def _check_signature_unless_public(self):
    if not self._anonymous_read:
        _check_signature(self)


def _check_action_permitted_unless_public(self, resource):
    if not self._anonymous_read:
        _check_action_permitted(self, resource)


def _canonical_aws_request(self):
    request = _create_aws_request(self)
    path, _, query = request.url.partition("?")
    pairs = sorted(
        (quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~"))
        for k, _, v in (p.partition("=") for p in query.split("&") if p)
    )
    request.url = quote(unquote(path), safe="/-_.~")
    if pairs:
        request.url += "?" + "&".join(f"{k}={v}" for k, v in pairs)
    return request


S3IAMRequest.__init__ = _init_denying_unsigned
S3IAMRequest._create_aws_request = _canonical_aws_request
S3IAMRequest.check_signature = _check_signature_unless_public
S3IAMRequest.check_action_permitted = _check_action_permitted_unless_public
main()
PY
}

start_moto() {
  local state_dir=$1 attempt port pid
  write_moto_launcher "$state_dir"
  for attempt in 1 2 3; do
    port=$(free_port)
    tls_port=$(free_port)
    # The first 4 authenticated actions are free; setup_s3 spends them creating the IAM user,
    # its policy, its key and the bucket. From then on every request must be signed by a key.
    INITIAL_NO_AUTH_ACTION_COUNT=4 python3 "$state_dir/moto_server.py" -H 127.0.0.1 -p "$port" \
      </dev/null >>"$state_dir/moto.log" 2>&1 &
    pid=$!
    echo "$pid" >>"$state_dir/pids"
    # /moto-api/ is moto's own dashboard: it answers without spending a free action.
    if wait_for "http://127.0.0.1:$port/moto-api/" "$pid"; then
      MOTO_PORT=$port
      return 0
    fi
    echo "test-servers: moto_server did not start on port $port (attempt $attempt)" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  tail -n 20 "$state_dir/moto.log" >&2 || true
  die "moto_server did not start; see $state_dir/moto.log"
}

# Creates the IAM user, its key and the bucket, uploads the objects, and prints
# "ACCESS_KEY_ID SECRET_ACCESS_KEY".
setup_s3() {
  python3 - "$1" "$2" <<'PY'
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config

endpoint, data_dir = sys.argv[1], sys.argv[2]
bucket = "wds-test"
common = dict(endpoint_url=endpoint, region_name="us-east-1")
# One attempt each: a retried request would spend another of the 4 free actions.
once = Config(retries={"max_attempts": 1, "mode": "standard"}, s3={"addressing_style": "path"})

names = [
    os.path.relpath(os.path.join(root, f), data_dir)
    for root, _, files in os.walk(data_dir)
    for f in files
]

anon = dict(aws_access_key_id="dummy", aws_secret_access_key="dummy", config=once, **common)
iam = boto3.client("iam", **anon)
iam.create_user(UserName="wds-test")
iam.put_user_policy(
    UserName="wds-test",
    PolicyName="allow-all",
    PolicyDocument='{"Version": "2012-10-17", '
    '"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}',
)
key = iam.create_access_key(UserName="wds-test")["AccessKey"]
boto3.client("s3", **anon).create_bucket(Bucket=bucket)

s3 = boto3.client(
    "s3",
    aws_access_key_id=key["AccessKeyId"],
    aws_secret_access_key=key["SecretAccessKey"],
    config=Config(s3={"addressing_style": "path"}, max_pool_connections=16),
    **common,
)
uploads = [(os.path.join(data_dir, n), "shards/" + n) for n in names]
with ThreadPoolExecutor(16) as pool:
    jobs = [pool.submit(s3.upload_file, path, bucket, k) for path, k in uploads]
    jobs += [
        pool.submit(s3.put_object, Bucket=bucket, Key=f"many/obj-{i:04d}.txt", Body=f"{i}\n")
        for i in range(1005)
    ]
    # One object anyone may read, for anonymous access.
    first = min(n for n in names if n.endswith(".tar"))
    with open(os.path.join(data_dir, first), "rb") as f:
        jobs.append(pool.submit(s3.put_object, Bucket=bucket, Key="public/" + first, Body=f.read(),
                                ACL="public-read"))
    for j in jobs:
        j.result()

# Concurrent puts into one bucket: check that the server kept them all.
count = sum(page.get("KeyCount", 0)
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket))
if count != len(names) + 1006:
    sys.exit(f"test-servers: error: bucket holds {count} objects, expected {len(names) + 1006}")
print(key["AccessKeyId"], key["SecretAccessKey"])
PY
}

# Azurite's Blob service alone, its data in STATE_DIR/azurite, emptied first: a start after a
# stop begins with no containers, as moto does.
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
  local data_dir bad pid keys key_id secret sas
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
  # (and stock moto's signature check mishandles some others).
  bad=$(cd "$data_dir" && find . ! -type d | sed 's|^\./||' |
    grep -Ev '^[A-Za-z0-9._~/-]+$' | head -n 1) || true
  [ -z "$bad" ] || die "$data_dir/$bad: only letters, digits and ._~/- in file names"
  command -v nginx >/dev/null || die "nginx is not installed (Debian package nginx-light or nginx)"
  # find_spec, not import: importing moto takes a second. Debian has no moto package: without
  # it only nginx starts and the S3 tests skip, except under CI (CI=true), where they must run.
  local with_s3=1
  if ! python3 -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, sys.argv[1:])))' \
    moto boto3 flask werkzeug; then
    [ "${CI:-}" = true ] && die "python3 lacks moto (5, with its server extras) or boto3"
    echo "test-servers: WARNING: python3 lacks moto 5 or boto3: no S3 server, the S3 tests" \
      "will skip (to run them: pip install \"moto[server]\" boto3)" >&2
    with_s3=0
  fi
  # Azurite comes from npm (scripts/setup-deps.sh); like moto it is required under CI only.
  local with_azure=1
  if ! command -v azurite-blob >/dev/null; then
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
    start_moto "$state_dir"
    keys=$(setup_s3 "http://127.0.0.1:$MOTO_PORT" "$data_dir") || die "S3 setup failed; see $state_dir/moto.log"
    read -r key_id secret <<<"$keys"
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
    echo "export WDS_TEST_CA=$(printf %q "$state_dir/ca.pem")"
    if [ "$with_s3" = 1 ]; then
      echo "export WDS_TEST_S3_ENDPOINT=http://127.0.0.1:$MOTO_PORT"
      echo "export WDS_TEST_S3_BUCKET=wds-test"
      echo "export WDS_TEST_AWS_ACCESS_KEY_ID=$(printf '%q' "$key_id")"
      echo "export WDS_TEST_AWS_SECRET_ACCESS_KEY=$(printf '%q' "$secret")"
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
    "$([ "$with_s3" = 1 ] && echo "127.0.0.1:$MOTO_PORT" || echo "none"), azure on" \
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
