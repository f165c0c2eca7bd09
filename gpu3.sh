export GLUON_COMMIT=4356b27 PYTHONUNBUFFERED=1 GLUON_CACHE_DIR=/tmp/gc0
timeout 300 python3 bench/gemm.py --graph --repeats 5 --kernels ws --no-triton --shapes 7936x8192x8192,8192x8192x8192,8448x8192x8192,7936x8192x2048,8192x8192x2048,8448x8192x2048 --dtypes fp16 --json $OUT/waves.json > $OUT/waves.log 2>&1; echo "rc=$?" >> $OUT/waves.log
tail -12 $OUT/waves.log
