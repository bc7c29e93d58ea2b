# Demos and trials: what a new user runs first (make demo, make demo-detect) and the rank-failure
# trials; each installs or builds what it needs first.
.PHONY: demo demo-detect reliability

# The main job on the built-in default (lenet on Fashion-MNIST, 10 epochs) on 2 ranks; about
# 1.5-3 minutes on 2 cores, ends near 91% test accuracy. The run goes to runs/demo-<time>. Then
# its evaluation on one rank per core, the stages spread over them from measured costs (--stages
# auto), against the sequential baseline on the same cores: the report says what the stages cost,
# the layout it chose and, when no layout of these ranks can beat the baseline here, why. Unbound
# ranks: a rank that starts bound to one core keeps GNU OpenMP's one-core thread waits even once
# widened, which slows a small model's baseline on several threads.
DEMO_RANKS ?= 2
DEMO_EVAL_RANKS ?= $(shell nproc)
demo: deps
	$(MAKE) --no-print-directory -j$$(nproc) apps
	@run=runs/demo-$$(date +%Y%m%d-%H%M%S) && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 && \
	  echo "mpiexec -n $(DEMO_RANKS) --oversubscribe ./train -s $$run" && \
	  mpiexec -n $(DEMO_RANKS) --oversubscribe ./train -s $$run && \
	  cmd="mpiexec -n $(DEMO_EVAL_RANKS) --oversubscribe --bind-to none ./pipeline_eval --checkpoint $$run --stages auto --compare -o $$run/eval" && \
	  echo "$$cmd" && $$cmd

# Faster R-CNN (ResNet-18 FPN, from random weights) on a seeded synthetic shapes set (VOC
# folders data/shapes-demo/train and data/shapes-demo/test, made once), 2 ranks; prints each
# epoch's losses and the test mAP, then evaluates the run with ./pipeline_eval on 3 ranks
# (boxes in RUN/eval/predictions.csv; measured figures: bench/RESULTS.md).
demo-detect: deps
	$(MAKE) --no-print-directory -j$$(nproc) apps tools
	@test -d data/shapes-demo/train || $(OUT)/bin/make_detection_dataset --out data/shapes-demo/train --count 400 --seed 1 --min-size 128 --max-size 160 --min-object 32 --max-objects 4
	@test -d data/shapes-demo/test || $(OUT)/bin/make_detection_dataset --out data/shapes-demo/test --count 50 --seed 2 --min-size 128 --max-size 160 --min-object 32 --max-objects 4
	@run=runs/demo-detect-$$(date +%Y%m%d-%H%M%S) && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 && \
	  cmd="mpiexec -n 2 --oversubscribe ./train --task detection -m fasterrcnn_resnet18_fpn -d data/shapes-demo --min-size 128 --max-size 160 -e 9 -lr 0.02 --warmup-epochs 1 --eval-every 3 --box-batch-size-per-image 128 --rpn-post-nms-top-n-test 300 -s $$run" && \
	  echo "$$cmd" && $$cmd && \
	  echo "mpiexec -n 3 --oversubscribe ./pipeline_eval -c $$run -b 2 -o $$run/eval" && \
	  mpiexec -n 3 --oversubscribe ./pipeline_eval -c $$run -b 2 -o $$run/eval

# Rank failure trials (bench/reliability.sh): seeded kills of one rank of ./train and
# ./pipeline_eval; prints the time-to-exit distribution (figures in bench/RESULTS.md).
reliability:
	$(MAKE) --no-print-directory -j$$(nproc) apps tools
	bash bench/reliability.sh
