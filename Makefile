# The README's two commands: `make demo` and `make test`. Both first run the
# setup step (scripts/bootstrap.sh: Debian packages when missing, .venv, pip
# install of pydsm, which builds the C core with CMake).
#
#   make demo       run `pydsm demo` (every experiment in quick mode; results/)
#   make test       commit messages, C unit tests, ASan+UBSan tests, TSan
#                   delegation and managed-heap tests, short libFuzzer runs, mypy --strict
#                   pydsm, pytest tests/py (notebooks too), then
#                   the sdist check (sdist -> wheel -> fresh venv)
#   make deploy-test  the Ansible playbooks for real on 3 namespace test hosts,
#                   then the cluster tests and fault tests across them (root)
#   make docs       the Python API reference (Sphinx) in build-docs/html
#   make setup      only the setup step
#   make clean      remove build directories, .venv and results/

SHELL     := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV      ?= .venv
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_TIME ?= 15
GEN       := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CMAKE     ?= cmake
CTEST     ?= ctest
export UCX_PROTO_ENABLE ?= y
FUZZERS   := $(notdir $(basename $(wildcard csrc/fuzz/fuzz_*.c)))

.PHONY: demo test setup docs commit-test c-test asan-test tsan-test fuzz-test py-test sdist-test deploy-test clean
.NOTPARALLEL:

demo: setup
	$(VENV)/bin/pydsm demo

# -k: every step runs even when an earlier one failed (one CI run shows all
# failures); make still exits non-zero if any step failed.
test: setup
	$(MAKE) --no-print-directory -k commit-test c-test asan-test tsan-test fuzz-test py-test sdist-test deploy-test
	@echo "make test: all steps passed"

setup:
	scripts/bootstrap.sh

# Commit messages: subject at most 72 characters, a blank line before the body.
commit-test:
	@echo "== commit messages"
	scripts/check-commits.sh

# Unit tests of the C core (ctest + cmocka). Without link-time optimisation:
# every test program links the static library, and with LTO each link
# compiles the whole library again; the installed library (pytest) and the
# benchmarks keep it.
c-test:
	@echo "== C unit tests (build/)"
	$(CMAKE) -S . -B build $(GEN) -DDSM_TESTS=ON -DDSM_BENCH=OFF -DDSM_LTO=OFF >/dev/null
	$(CMAKE) --build build -j $(JOBS)
	$(CTEST) --test-dir build --output-on-failure --timeout 300

# The same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
asan-test:
	@echo "== C unit tests with ASan+UBSan (build-asan/)"
	$(CMAKE) -S . -B build-asan $(GEN) -DDSM_TESTS=ON -DDSM_BENCH=OFF -DDSM_SANITIZE=address >/dev/null
	$(CMAKE) --build build-asan -j $(JOBS)
	ASAN_OPTIONS=$${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
	UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	  $(CTEST) --test-dir build-asan --output-on-failure --timeout 600

# The delegation, managed-heap and ownership tests under ThreadSanitizer.
# Not the litmus tests, whose programs race on purpose (docs/ARCHITECTURE.md,
# "ThreadSanitizer and the fabric").
TSAN_GLOB := test_deleg*.c;test_mheap*.c;test_own_place.c;test_own_mutex.c;test_own_protocol.c;test_own_failure.c;test_own_units.c;test_own_kv.c
tsan-test:
	@echo "== delegation, managed-heap and ownership tests with TSan (build-tsan/)"
	$(CMAKE) -S . -B build-tsan $(GEN) -DDSM_TESTS=ON -DDSM_BENCH=OFF -DDSM_SANITIZE=thread \
	  -DDSM_TEST_GLOB='$(TSAN_GLOB)' >/dev/null
	$(CMAKE) --build build-tsan -j $(JOBS)
	TSAN_OPTIONS=$${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
	  $(CTEST) --test-dir build-tsan --output-on-failure --timeout 600 -R 'deleg|mheap|own_'

# Every libFuzzer target (csrc/fuzz/fuzz_*.c) for FUZZ_TIME seconds each. UCX's
# own signal handler is off so that libFuzzer reports (and saves) a crash.
fuzz-test:
	@echo "== libFuzzer targets, $(FUZZ_TIME) s each (build-fuzz/): $(FUZZERS)"
ifneq ($(FUZZERS),)
	CC=clang $(CMAKE) -S . -B build-fuzz $(GEN) -DDSM_FUZZ=ON -DDSM_TESTS=OFF -DDSM_BENCH=OFF >/dev/null
	$(CMAKE) --build build-fuzz -j $(JOBS) --target $(FUZZERS)
	for f in $(FUZZERS); do \
	  mkdir -p build-fuzz/corpus/$$f; \
	  seeds=""; [ -d csrc/fuzz/corpus/$$f ] && seeds=csrc/fuzz/corpus/$$f; \
	  echo "-- $$f"; \
	  if ! UCX_HANDLE_ERRORS=none ./build-fuzz/$$f -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
	      -artifact_prefix=build-fuzz/ build-fuzz/corpus/$$f $$seeds > build-fuzz/$$f.log 2>&1; then \
	    tail -n 80 build-fuzz/$$f.log; echo "$$f FAILED (full log: build-fuzz/$$f.log)"; exit 1; \
	  fi; \
	  grep -E '^(Done|stat::number_of_executed_units)' build-fuzz/$$f.log || tail -n 3 build-fuzz/$$f.log; \
	done
else
	@echo "no fuzz targets"
endif

# The Python package, CLI, plugin and notebooks, against the installed pydsm.
py-test:
	@echo "== mypy --strict pydsm"
	$(VENV)/bin/mypy --strict pydsm
	$(MAKE) --no-print-directory docs
	@echo "== pytest tests/py"
	$(VENV)/bin/pytest tests/py -q -ra

# The API reference from the docstrings (docs/api), into build-docs/html;
# a warning fails it.
docs:
	@echo "== API reference (Sphinx; warnings are errors) -> build-docs/html/index.html"
	$(VENV)/bin/python -m sphinx -E -W --keep-going -q -b html docs/api build-docs/html

# The package as an index serves it: build the sdist, a wheel from that sdist
# alone (pip unpacks it elsewhere: nothing of the checkout helps), install the
# wheel in a fresh venv and check the C core and dsmd are inside.
sdist-test:
	@echo "== sdist -> wheel -> fresh venv (build-sdist/)"
	rm -rf build-sdist && mkdir -p build-sdist
	$(VENV)/bin/python -m build --sdist --outdir build-sdist/dist . >build-sdist/sdist.log 2>&1 \
	  || { tail -n 40 build-sdist/sdist.log; exit 1; }
	PYDSM_JOBS=$${PYDSM_JOBS:-$(JOBS)} $(VENV)/bin/python -m pip wheel --no-deps --wheel-dir build-sdist/dist \
	  build-sdist/dist/pydsm-*.tar.gz >build-sdist/wheel.log 2>&1 || { tail -n 60 build-sdist/wheel.log; exit 1; }
	python3 -m venv build-sdist/venv
	build-sdist/venv/bin/python -m pip install -q --disable-pip-version-check build-sdist/dist/pydsm-*.whl \
	  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
	cd build-sdist && venv/bin/python -I -c "import os, pydsm; print('pydsm', pydsm.__version__, 'libdsm', pydsm.lib_version()); \
	  d = os.path.join(os.path.dirname(pydsm.__file__), 'bin', 'dsmd'); assert os.access(d, os.X_OK), d; print(d)"
	@echo "sdist-test: passed"

# Deploy with playbooks/ to 3 network-namespace hosts with their own sshd
# (scripts/testhosts.sh), run the cluster tests with --dsm-connect and the
# fault tests across them, tear down (scripts/deploy-test.sh; needs root).
deploy-test:
	@echo "== deploy to namespace test hosts, cluster and fault tests (build-deploy/)"
	VENV=$(VENV) scripts/deploy-test.sh

clean:
	rm -rf build build-py build-sdist build-docs build-deploy build-asan build-tsan build-fuzz $(VENV) results dist *.egg-info
