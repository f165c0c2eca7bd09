export GLUON_COMMIT=d1eb000 PYTHONUNBUFFERED=1
S="--graph --repeats 5 --round-ms 1000 --kernels ws --shapes 2048x2048x2048,2048x2048x4096,1536x2816x2048"
(export CUDA_VISIBLE_DEVICES=0 GLUON_CACHE_DIR=/tmp/gc0; timeout 250 python3 bench/gemm.py $S --json $OUT/ow_g0.json > $OUT/gpu0.log 2>&1; echo "rc=$?" >> $OUT/gpu0.log) &
(export CUDA_VISIBLE_DEVICES=1 GLUON_CACHE_DIR=/tmp/gc1; timeout 250 python3 bench/gemm.py $S --json $OUT/ow_g1.json > $OUT/gpu1.log 2>&1; echo "rc=$?" >> $OUT/gpu1.log) &
wait
grep -a " -> \|rc=" $OUT/gpu0.log $OUT/gpu1.log
