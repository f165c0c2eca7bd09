export GLUON_COMMIT=d1eb000 PYTHONUNBUFFERED=1
S="--graph --repeats 9 --kernels ws --no-triton --shapes 8192x8192x8192,4096x4096x4096"
(export CUDA_VISIBLE_DEVICES=0 GLUON_CACHE_DIR=/tmp/gc0
 timeout 60 python3 bench/gemm.py $S --round-ms 200 --json $OUT/g0_200.json > $OUT/gpu0.log 2>&1
 timeout 150 python3 bench/gemm.py $S --round-ms 1000 --json $OUT/g0_1000.json >> $OUT/gpu0.log 2>&1; echo "rc=$?" >> $OUT/gpu0.log) &
(export CUDA_VISIBLE_DEVICES=1 GLUON_CACHE_DIR=/tmp/gc1
 timeout 150 python3 bench/gemm.py $S --round-ms 1000 --json $OUT/g1_1000.json > $OUT/gpu1.log 2>&1
 timeout 60 python3 bench/gemm.py $S --round-ms 200 --json $OUT/g1_200.json >> $OUT/gpu1.log 2>&1; echo "rc=$?" >> $OUT/gpu1.log) &
wait
grep -a " -> \|rc=" $OUT/gpu0.log $OUT/gpu1.log
