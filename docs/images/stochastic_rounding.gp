# Lesson 6's figure (docs/amp.md, "Stochastic rounding"): the test accuracy
# during training of examples/lessons/stochastic_rounding.cpp's four runs.
#   build/examples/lesson_stochastic_rounding --csv sr.csv --plot docs/images/stochastic_rounding.png
# or by hand: gnuplot -e "csv='sr.csv'; out='sr.png'" docs/images/stochastic_rounding.gp
if (!exists("csv")) csv = "stochastic_rounding.csv"
if (!exists("out")) out = "stochastic_rounding.png"
if (!exists("title")) title = ""
set datafile separator ","
set terminal pngcairo size 1000,600
set output out
set title "784-256-10 MLP on Fashion-MNIST, bfloat16 parameters without AMP's master weights\n".title
set xlabel "step (batch 64)"
set ylabel "test accuracy (first 2000 test images)"
set grid
set key bottom right
set yrange [0:1]
plot csv using 1:2 with lines lw 2 title "float32", \
     csv using 1:3 with lines lw 2 title "bfloat16, round to nearest", \
     csv using 1:4 with lines lw 2 dt 2 title "bfloat16 + stochastic rounding", \
     csv using 1:5 with lines lw 1 dt 3 title "bfloat16 + float32 master"
