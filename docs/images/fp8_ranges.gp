# Lesson 7's figure (docs/amp.md, "fp8 ranges and why a scale per tensor"):
# delayed scaling at work in examples/lessons/fp8_ranges.cpp's fp8 run, and
# the three runs' losses.
#   build/examples/lesson_fp8_ranges --csv fp8.csv --plot docs/images/fp8_ranges.png
# or by hand: gnuplot -e "csv='fp8.csv'; out='fp8.png'" docs/images/fp8_ranges.gp
# The CSV: step, three losses, then for fc1 and fc3 the amax of x, W, dY per
# step and their scales (every 10th step; blank between reads).
if (!exists("csv")) csv = "fp8_ranges.csv"
if (!exists("out")) out = "fp8_ranges.png"
if (!exists("title")) title = ""
set datafile separator ","
set terminal pngcairo size 1000,1100
set output out
set multiplot layout 3,1 title "784-256-128-10 MLP on Fashion-MNIST under the fp8 recipe\n".title
set grid
set logscale y
set format y "%g"
set key outside right
set xlabel "step (batch 64)"

# 1. What each step recorded into fc1's history (points), and the amax its
#    scale was made from, fp8_max / scale (lines): the max of the earlier steps.
set title "fc1: amax recorded per step (points) and fp8\\_max / scale, the amax the step used (lines)"
set ylabel "amax"
plot csv using 1:5 with points pt 7 ps 0.3 lc 1 title "x (E4M3)", \
     csv using 1:($8 > 0 ? 448/$8 : 1/0) with steps lw 2 lc 1 title "448 / scale x", \
     csv using 1:6 with points pt 7 ps 0.3 lc 2 title "W (E4M3)", \
     csv using 1:($9 > 0 ? 448/$9 : 1/0) with steps lw 2 lc 2 title "448 / scale W", \
     csv using 1:7 with points pt 7 ps 0.3 lc 3 title "dY (E5M2)", \
     csv using 1:($10 > 0 ? 57344/$10 : 1/0) with steps lw 2 lc 3 title "57344 / scale dY"

# 2. The same for fc3 (its dY is (softmax - onehot) / 64: larger, and it shrinks as the loss does).
set title "fc3: amax recorded per step (points) and fp8\\_max / scale (lines)"
plot csv using 1:11 with points pt 7 ps 0.3 lc 1 title "x (E4M3)", \
     csv using 1:($14 > 0 ? 448/$14 : 1/0) with steps lw 2 lc 1 title "448 / scale x", \
     csv using 1:12 with points pt 7 ps 0.3 lc 2 title "W (E4M3)", \
     csv using 1:($15 > 0 ? 448/$15 : 1/0) with steps lw 2 lc 2 title "448 / scale W", \
     csv using 1:13 with points pt 7 ps 0.3 lc 3 title "dY (E5M2)", \
     csv using 1:($16 > 0 ? 57344/$16 : 1/0) with steps lw 2 lc 3 title "57344 / scale dY"

# 3. The losses, averaged over 20 steps.
set title "training loss (mean of 20 steps)"
set ylabel "cross entropy"
unset logscale y
set format y "%.2f"
bin(s) = 20 * floor(s / 20)
set style data lines
plot csv using (bin($1)):2 smooth unique lw 2 title "float32", \
     csv using (bin($1)):3 smooth unique lw 2 dt 2 title "bf16 AMP", \
     csv using (bin($1)):4 smooth unique lw 2 title "fp8 recipe"
unset multiplot
