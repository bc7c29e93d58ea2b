// The subcommands of ./recommend (src/apps/recommend.cpp): each takes the arguments after its
// name (argv[0] is the subcommand's name), prints its own usage on -h, and returns the exit
// code. Errors are thrown as mpicnn::Error; the app prints them as one line.
#pragma once

namespace mpicnn::recommend {

int sweep_main(int argc, char** argv);    // sweep.cpp: run a grid of ./train configurations
int fit_main(int argc, char** argv);      // fit.cpp: train the recommender on runs
int suggest_main(int argc, char** argv);  // suggest.cpp: rank configurations for a model and data
int report_main(int argc, char** argv);   // report.cpp: one self-contained HTML comparing runs
int serve_main(int argc, char** argv);    // serve.cpp: the report and suggestions over HTTP

}  // namespace mpicnn::recommend
