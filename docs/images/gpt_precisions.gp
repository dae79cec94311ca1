# docs/gpt.md's figure: the training loss (step rows) and the validation loss
# (epoch rows) of examples/gpt's metrics CSVs, one curve per precision.
#   gnuplot -e "dir='.'" docs/images/gpt_precisions.gp   # reads dir/gpt_{fp32,bf16,fp16}.csv
if (!exists("dir")) dir = "."
set datafile separator ","
set terminal pngcairo size 1000,600
set output "docs/images/gpt_precisions.png"
set title "examples/gpt, CPU config on the fortunes: loss by precision (2 cores)"
set xlabel "step"
set ylabel "loss (nats per character)"
set grid
set key top right
set yrange [1.9:4.8]
files = "fp32 bf16 fp16"
rows(kind, p) = "< grep '^".kind.",' ".dir."/gpt_".p.".csv"
plot for [i=1:words(files)] rows("step", word(files, i)) using 2:4 with lines lw 1.5 dt i title word(files, i)." training", \
     for [i=1:words(files)] rows("epoch", word(files, i)) using 2:9 with points pt 6+i ps 1.2 title word(files, i)." validation"
