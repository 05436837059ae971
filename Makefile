# The two commands of the README.
#   make demo   the main job on the embedded default (memory://): no broker needed;
#               examples/demo is in the root module, so no broker client is compiled
#   make test   every test, brokers included (starts them first)
#
# make release VERSION=v0.3.0 is scripts/release.sh v0.3.0: a dry run; add
# DRY_RUN=false to tag (README.md, Modules, Releases).

.PHONY: demo test brokers brokers-down bench fuzz faults soak release

demo:
	go run ./examples/demo

test:
	bash scripts/test.sh

brokers:
	bash scripts/brokers.sh up

DRY_RUN ?= true
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z [DRY_RUN=false]" >&2; exit 2; }
	bash scripts/release.sh $(VERSION) -dry-run=$(DRY_RUN)

brokers-down:
	bash scripts/brokers.sh down

bench:
	bash scripts/bench.sh

# The fault suite's full form (issue 16): every broker through a worker SIGKILL, a
# connection cut, a broker restart and refused dead-letter writes, 3,000 messages a run;
# writes docs/reliability.json and the tables of docs/reliability.md. Its short form runs
# in make test.
faults:
	bash scripts/faults.sh

# The soak benchmark's long form (issue 39): the runtime in a worker process of its own
# on Redis, RabbitMQ and Kafka side by side, 30 minutes at half the peak measured first,
# with a failure mix; RSS, Go heap, goroutines, open descriptors and p99 latency sampled
# every minute must stay flat after the warm-up, and every meta.id be accounted for.
# Its short form (2 minutes) runs in make test.
soak:
	bash scripts/soak.sh

# transport/redis and transport/artemis are modules of their own: go.work lets these
# run from the root with the package path.
#
# Each budget is a count of executions, about a minute of each target on this 2-core
# machine: a duration (-fuzztime 60s) lets Go 1.26's fuzz coordinator report its own
# deadline as a failure at the end ("context deadline exceeded", no crasher written;
# golang/go#75804, fixed in Go 1.27), which it did here once in six targets.
fuzz:
	go test -run '^$$' -fuzz FuzzDecode -fuzztime 2000000x -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzScanValid -fuzztime 2000000x -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzPoisonBody -fuzztime 1000000x -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzRemoveDeadLetter -fuzztime 1500000x -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzUnframe -fuzztime 600000x -fuzzminimizetime 3s ./transport/redis/
	go test -run '^$$' -fuzz FuzzFromAMQP -fuzztime 800000x -fuzzminimizetime 3s ./transport/artemis/
