export GLUON_COMMIT=9e90bb7 PYTHONUNBUFFERED=1
(export CUDA_VISIBLE_DEVICES=0 GLUON_CACHE_DIR=/tmp/gc0
 timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "persistent_ws and float32" -p no:cacheprovider > $OUT/gpu0.log 2>&1; echo "fp32auto rc=$?" >> $OUT/gpu0.log
 timeout 300 python3 bench/gemm.py --graph --repeats 11 --kernels ws --shapes 8192x8192x8192,4096x4096x4096,2048x2048x2048 --json $OUT/r11_gpu0.json >> $OUT/gpu0.log 2>&1; echo "r11 rc=$?" >> $OUT/gpu0.log) &
(export CUDA_VISIBLE_DEVICES=1 GLUON_CACHE_DIR=/tmp/gc1
 timeout 300 python3 bench/gemm.py --graph --repeats 11 --kernels ws --shapes 8192x8192x8192,4096x4096x4096,2048x2048x2048 --json $OUT/r11_gpu1.json > $OUT/gpu1.log 2>&1; echo "r11 rc=$?" >> $OUT/gpu1.log
 timeout 120 python3 bench/gemm.py --graph --repeats 5 --out-dtype fp32 --dtypes fp16,bf16 --no-triton --kernels ws --shapes 8192x8192x8192,4096x4096x4096,2048x2048x2048,16384x8192x1024 --json $OUT/fp32auto.json >> $OUT/gpu1.log 2>&1; echo "fp32 rc=$?" >> $OUT/gpu1.log) &
wait
grep -a "passed\|failed\|rc=" $OUT/gpu0.log $OUT/gpu1.log
grep -a -A10 "^GEMM on" $OUT/gpu0.log
grep -a -A12 "^GEMM on" $OUT/gpu1.log
