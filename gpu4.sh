export GLUON_COMMIT=2101006 PYTHONUNBUFFERED=1
(export CUDA_VISIBLE_DEVICES=0 GLUON_CACHE_DIR=/tmp/gc0
 timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -k fp32_output -p no:cacheprovider > $OUT/gpu0.log 2>&1; echo "fp32tests rc=$?" >> $OUT/gpu0.log
 timeout 120 python3 bench/gemm.py --graph --repeats 5 --out-dtype fp32 --dtypes fp16 --shapes 8192x8192x8192,4096x4096x4096,2048x2048x2048,16384x8192x1024 --kernels "ws,ws[EPILOGUE=tma,STAGES=2],ws[BLOCK_N=128,EPILOGUE=tma,STAGES=4]" --ws-configs ";EPILOGUE=tma,STAGES=2;BLOCK_N=128,EPILOGUE=tma,STAGES=4" --json $OUT/fp32.json >> $OUT/gpu0.log 2>&1; echo "fp32 rc=$?" >> $OUT/gpu0.log
 timeout 330 python3 bench/gemm.py --graph --repeats 5 --kernels ws --json $OUT/gemm20b.json >> $OUT/gpu0.log 2>&1; echo "gemm20 rc=$?" >> $OUT/gpu0.log) &
(export CUDA_VISIBLE_DEVICES=1 GLUON_CACHE_DIR=/tmp/gc1
 ( time timeout 420 python3 -m gluon tune specs/gemm_sm90.toml ) > $OUT/gpu1.log 2>&1; echo "tune rc=$?" >> $OUT/gpu1.log
 timeout 40 python3 -m gluon build --best >> $OUT/gpu1.log 2>&1; echo "build rc=$?" >> $OUT/gpu1.log
 timeout 90 python3 bench/tuned.py gemm_sm90 --repeats 7 --json $OUT/tuned2.json >> $OUT/gpu1.log 2>&1; echo "tuned rc=$?" >> $OUT/gpu1.log
 python3 -m gluon results --json > $OUT/results2_best.json 2>/dev/null) &
wait
grep -a "passed\|failed\|rc=" $OUT/gpu0.log; grep -a -A12 "^GEMM on" $OUT/gpu0.log | head -20
grep -a "real\|rc=\|best" $OUT/gpu1.log | tail -6; tail -8 $OUT/gpu1.log
grep -a -A25 "^GEMM on" $OUT/gpu0.log | tail -25
