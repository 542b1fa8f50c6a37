#!/usr/bin/env bash
# setup.sh installs what the tests need on a fresh machine and nothing that
# is already there:
#   - redis-server and redis-cli (Debian packages redis-server, redis-tools):
#     the Redis tests start private servers from these binaries;
#   - nats-server (Debian package nats-server): for the tests that run an
#     external server (the NATS suite also embeds one in-process);
#   - chromium (Debian package chromium): the dashboard's browser test
#     drives it headless;
#   - the PostgreSQL server binaries, initdb and postgres (Debian package
#     postgresql): the outbox tests start private servers from them
#     (internal/testkit/pgtest finds them with pg_config --bindir or in
#     /usr/lib/postgresql/*/bin; they are not on PATH). As root the tests
#     run them as the user postgres, which the package creates;
#   - rabbitmq-server (Debian package rabbitmq-server, with Erlang and
#     epmd): internal/testkit/rabbittest starts private nodes from it, each
#     with its own epmd, ports and data directory; the service the package
#     may start is never used by the tests;
#   - Java (Debian package openjdk-17-jre-headless) and Maven (Debian
#     package maven), then the Apache Kafka broker's jars, the version
#     pinned in scripts/kafka/pom.xml, fetched once from Maven Central
#     into ~/.m2/bus-kafka/<version>/libs (BUS_KAFKA_LIBS overrides):
#     internal/testkit/kafkatest starts private KRaft brokers from them;
#   - moto_server, the local AWS emulator (PyPI package moto with its
#     server extra, the version pinned below) that
#     internal/testkit/awstest starts for the sqs:// tests: when no
#     moto_server is on PATH it is installed with pip into a virtual
#     environment at ~/.cache/bus-moto/venv (BUS_MOTO_VENV overrides),
#     where awstest also looks; Debian's python3-venv is installed first
#     when Python lacks venv;
#   - staticcheck and deadcode, pinned, into $(go env GOPATH)/bin.
# Go itself (see go.mod for the version) must be installed. Packages are
# installed with apt-get, as root or through sudo. The script exports
# nothing: tests start their own servers unless BUS_REDIS_URL or
# BUS_NATS_URL are set by the caller. The PostgreSQL service the package
# may start is never used by the tests.
set -euo pipefail

STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
DEADCODE_VERSION="${DEADCODE_VERSION:-v0.52.0}"
MOTO_VERSION="${MOTO_VERSION:-5.2.1}"

log() { printf 'setup: %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="$PATH:/usr/local/go/bin"
	else
		log "go is not installed; install the Go toolchain named in go.mod first"
		exit 1
	fi
fi

apt_install() {
	local sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1; then
			sudo="sudo"
		else
			log "need root (or sudo) to install: $*"
			exit 1
		fi
	fi
	log "installing $*"
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# find_bin NAME: true when NAME is on PATH or in an sbin directory (Debian
# installs nats-server to /usr/sbin, which is not on every user's PATH).
find_bin() {
	command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/local/sbin/$1" ]
}

# find_initdb: true when the PostgreSQL server binaries are installed.
find_initdb() {
	local dir
	dir="$(pg_config --bindir 2>/dev/null || true)"
	if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
		return 0
	fi
	for dir in /usr/lib/postgresql/*/bin; do
		if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
			return 0
		fi
	done
	command -v initdb >/dev/null 2>&1
}

# find_rabbitmq: true when the RabbitMQ server scripts and epmd are
# installed (Debian puts the scripts the tests run in /usr/lib/rabbitmq/bin).
find_rabbitmq() {
	{ [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || find_bin rabbitmq-server; } && command -v epmd >/dev/null 2>&1
}

packages=()
find_bin redis-server || packages+=(redis-server)
find_bin redis-cli || packages+=(redis-tools)
find_bin nats-server || packages+=(nats-server)
find_bin chromium || find_bin chromium-browser || packages+=(chromium)
find_initdb || packages+=(postgresql)
find_rabbitmq || packages+=(rabbitmq-server)
find_bin java || packages+=(openjdk-17-jre-headless)
find_bin mvn || packages+=(maven)
if [ "${#packages[@]}" -gt 0 ]; then
	apt_install "${packages[@]}"
	# The Debian redis-server package starts a system service; the tests
	# do not use it, so it is left as the package set it up.
fi
for bin in redis-server redis-cli nats-server; do
	find_bin "$bin" || { log "$bin is still missing after install"; exit 1; }
done
find_initdb || { log "initdb is still missing after install"; exit 1; }
find_rabbitmq || { log "rabbitmq-server is still missing after install"; exit 1; }

# The Kafka broker: its jars and their dependencies, copied once.
kafka_pom="$(dirname "$0")/kafka/pom.xml"
kafka_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$kafka_pom")"
kafka_libs="${BUS_KAFKA_LIBS:-$HOME/.m2/bus-kafka/$kafka_version/libs}"
if ! [ -f "$kafka_libs/kafka_2.13-$kafka_version.jar" ] || ! ls "$kafka_libs"/log4j-slf4j-impl-*.jar >/dev/null 2>&1; then
	log "fetching the Kafka $kafka_version broker into $kafka_libs"
	mvn -q -B -f "$kafka_pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$kafka_libs"
fi
[ -f "$kafka_libs/kafka_2.13-$kafka_version.jar" ] || { log "the Kafka jars are still missing in $kafka_libs"; exit 1; }
# The AWS emulator for the sqs:// tests.
moto_venv="${BUS_MOTO_VENV:-$HOME/.cache/bus-moto/venv}"
if ! command -v moto_server >/dev/null 2>&1 && ! [ -x "$moto_venv/bin/moto_server" ]; then
	if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
		apt_install python3 python3-venv
	fi
	log "installing moto[server] $MOTO_VERSION into $moto_venv"
	python3 -m venv "$moto_venv"
	"$moto_venv/bin/pip" install -q "moto[server]==$MOTO_VERSION"
fi
command -v moto_server >/dev/null 2>&1 || [ -x "$moto_venv/bin/moto_server" ] || { log "moto_server is still missing"; exit 1; }
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
	log "running as root, and initdb refuses root: the tests need the user postgres (the postgresql package creates it)"
	exit 1
fi

gobin="$(go env GOPATH)/bin"
if ! [ -x "$gobin/staticcheck" ] && ! command -v staticcheck >/dev/null 2>&1; then
	log "installing staticcheck $STATICCHECK_VERSION"
	go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
if ! [ -x "$gobin/deadcode" ] && ! command -v deadcode >/dev/null 2>&1; then
	log "installing deadcode $DEADCODE_VERSION"
	go install "golang.org/x/tools/cmd/deadcode@$DEADCODE_VERSION"
fi
nats_bin="$(command -v nats-server || echo /usr/sbin/nats-server)"
log "ready: $(redis-server --version | cut -d' ' -f3), $("$nats_bin" --version 2>&1), $(go version | cut -d' ' -f3)"
