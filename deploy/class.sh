#!/usr/bin/env bash
# A larger class on this machine, one command: Redis (the class's shared state), N replicas of the app, the training
# workers (RQ, on that Redis), and nginx in front of the replicas with sticky sessions. Ctrl-C stops them all.
#
#   deploy/class.sh N            N replicas (default 2); students open http://THIS-MACHINE:8500
#
# Settings (environment): CLASS_PORT (8500, the address students open), CLASS_REPLICA_PORT (8601: the first
# replica's port; the others follow), CLASSROOM_PUBLIC_URL (the address students open, for the live class's join
# link; default: nginx's port on this machine's network address), CLASS_REDIS_URL (default: start redis-server on 127.0.0.1:CLASS_REDIS_PORT, 6390, with its
# append-only file in the state folder; set it to use a Redis elsewhere), CLASS_STATE (.class: Redis's files, logs,
# the replicas' shared cookie secret, nginx's configuration), CLASS_PYTHON (.venv/bin/python), MECHLIB_THREADS (each
# replica's torch threads; default: the cores divided among the replicas), CLASS_WORKERS (2: training workers, each
# running one training at a time on CLASS_WORKER_THREADS threads, default 1, niced below the replicas).
# Needs Debian's nginx and redis-server (apt-get install nginx redis-server) and the app's venv (the README).
set -euo pipefail
cd "$(dirname "$0")/.."

replicas=${1:-2}
port=${CLASS_PORT:-8500}
first=${CLASS_REPLICA_PORT:-8601}
state=$(mkdir -p "${CLASS_STATE:-.class}" && cd "${CLASS_STATE:-.class}" && pwd)
python=${CLASS_PYTHON:-.venv/bin/python}
mkdir -p "$state/redis" "$state/logs" "$state/nginx/temp"

pids=()
worker_pids=()
stop() {
    trap - EXIT INT TERM
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap stop EXIT INT TERM

# Redis: checkpoints by id, pins, expiry; the append-only file keeps them across restarts.
if [ -z "${CLASS_REDIS_URL:-}" ]; then
    redis-server --port "${CLASS_REDIS_PORT:-6390}" --bind 127.0.0.1 --dir "$state/redis" --appendonly yes --save "" \
        >"$state/logs/redis.log" 2>&1 &
    pids+=($!)
    CLASS_REDIS_URL=redis://127.0.0.1:${CLASS_REDIS_PORT:-6390}/0
fi
export CLASSROOM_REDIS_URL=$CLASS_REDIS_URL
# The address students open (the live class's join link and QR code): nginx's, on this machine's network address.
export CLASSROOM_PUBLIC_URL=${CLASSROOM_PUBLIC_URL:-http://$(hostname -I 2>/dev/null | cut -d' ' -f1 || echo localhost):$port}

# Each replica's torch gets its share of the cores (MECHLIB_THREADS, at least 1): two replicas of two threads each on
# two cores oversubscribe them, and torch's waiting threads spin.
export MECHLIB_THREADS=${MECHLIB_THREADS:-$(( $(nproc) / replicas > 0 ? $(nproc) / replicas : 1 ))}

# The class's job key: the replicas and the workers seal what a training sends through Redis with it, and open nothing
# else (classroom/training/rq_jobs.py). Redis never holds it.
[ -s "$state/job-key" ] || head -c 32 /dev/urandom | base64 >"$state/job-key"
CLASSROOM_JOB_KEY=${CLASSROOM_JOB_KEY:-$(cat "$state/job-key")}
export CLASSROOM_JOB_KEY

# Training workers: each takes the class's next training from Redis (classroom/training/rq_jobs.py). More machines add
# theirs with the same command and the same CLASSROOM_REDIS_URL.
for ((i = 0; i < ${CLASS_WORKERS:-2}; i++)); do
    MECHLIB_THREADS=${CLASS_WORKER_THREADS:-1} "$python" -m classroom.training.rq_worker "$CLASSROOM_REDIS_URL" \
        >"$state/logs/worker-$i.log" 2>&1 &
    pids+=($!)
    worker_pids+=($!)
done

# The replicas share one cookie secret, so that a browser's XSRF cookie from one is valid on every other.
[ -s "$state/cookie-secret" ] || head -c 32 /dev/urandom | base64 >"$state/cookie-secret"
STREAMLIT_SERVER_COOKIE_SECRET=$(cat "$state/cookie-secret")
export STREAMLIT_SERVER_COOKIE_SECRET
upstreams=""
replica_pids=()
for ((i = 0; i < replicas; i++)); do
    replica=$((first + i))
    "$python" -m streamlit run app.py --server.port "$replica" --server.address 127.0.0.1 \
        >"$state/logs/replica-$replica.log" 2>&1 &
    pids+=($!)
    replica_pids+=($!)
    upstreams+="        server 127.0.0.1:$replica;"$'\n'
done

# nginx: a browser's first request gets a route cookie; every later one (the page's files, its websocket, an upload,
# a reconnect) is hashed on it to the same replica. A replica that does not answer is skipped, so the next page
# load of its students reaches another.
user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root;"
cat >"$state/nginx/nginx.conf" <<CONF
$user_line
worker_processes 1;
error_log $state/logs/nginx-error.log warn;
pid $state/nginx/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $state/nginx/temp/body;
    proxy_temp_path $state/nginx/temp/proxy;
    fastcgi_temp_path $state/nginx/temp/fastcgi;
    uwsgi_temp_path $state/nginx/temp/uwsgi;
    scgi_temp_path $state/nginx/temp/scgi;
    client_max_body_size 70m;
    map \$cookie_class_route \$route { "" \$request_id; default \$cookie_class_route; }
    map \$http_upgrade \$connection_upgrade { default upgrade; "" close; }
    upstream replicas {
        hash \$route consistent;
$upstreams    }
    server {
        listen $port;
        location / {
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_read_timeout 1d;
            proxy_next_upstream error timeout http_502 http_503;
            add_header Set-Cookie "class_route=\$route; Path=/; HttpOnly; SameSite=Lax" always;
            add_header X-Class-Replica \$upstream_addr always;  # which replica answered: for the teacher's logs and the tests
        }
    }
}
CONF
nginx -p "$state/nginx" -c "$state/nginx/nginx.conf" -g "daemon off;" &
pids+=($!)

echo "${replica_pids[*]}" >"$state/replica-pids"
echo "${worker_pids[*]}" >"$state/worker-pids"
echo "A class of $replicas replicas at $CLASSROOM_PUBLIC_URL" \
     "(Redis at $CLASSROOM_REDIS_URL; logs in $state/logs). Ctrl-C stops it."
wait  # a replica that dies leaves the others serving (nginx skips it); Ctrl-C ends the class
