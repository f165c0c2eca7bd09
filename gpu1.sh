export GLUON_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo e707883) PYTHONUNBUFFERED=1 GLUON_UNVERIFIED=1
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
(CUDA_VISIBLE_DEVICES=0 GLUON_CACHE_DIR=/tmp/gc0 timeout 560 python3 -m pytest -q -m gpu tests/test_gpu.py -k lean_prologue -p no:cacheprovider > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log) &
(CUDA_VISIBLE_DEVICES=1 GLUON_CACHE_DIR=/tmp/gc1 timeout 560 python3 bench/gemm.py --graph --repeats 5 --shapes 2048x2048x64,2048x2048x2048,1536x2816x2048,2048x2048x4096 --kernels "ws,ws[LEAN_PROLOGUE=True],ws[BLOCK_K=32,SWIZZLE=64,STAGES=6]" --ws-configs ";LEAN_PROLOGUE=True;BLOCK_K=32,SWIZZLE=64,STAGES=6" --json $OUT/b.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log) &
wait
tail -5 $OUT/tests.log
tail -40 $OUT/bench.log
