# The two commands of the README.
#   make demo   the main job on the embedded default (memory://): no broker needed;
#               examples/demo is in the root module, so no broker client is compiled
#   make test   every test, brokers included (starts them first)

.PHONY: demo test brokers brokers-down bench fuzz faults

demo:
	go run ./examples/demo

test:
	bash scripts/test.sh

brokers:
	bash scripts/brokers.sh up

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

# transport/redis and transport/artemis are modules of their own: go.work lets these
# run from the root with the package path.
fuzz:
	go test -run '^$$' -fuzz FuzzDecode -fuzztime 60s -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzScanValid -fuzztime 60s -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzPoisonBody -fuzztime 60s -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzRemoveDeadLetter -fuzztime 60s -fuzzminimizetime 3s ./envelope/
	go test -run '^$$' -fuzz FuzzUnframe -fuzztime 60s -fuzzminimizetime 3s ./transport/redis/
	go test -run '^$$' -fuzz FuzzFromAMQP -fuzztime 60s -fuzzminimizetime 3s ./transport/artemis/
