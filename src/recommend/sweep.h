// `recommend sweep`: a grid file of ./train options (sweep_grid.cpp reads it, sweep.cpp runs
// it). Each grid point becomes a run directory DIR/<name> holding the trainer's own outputs and
// sweep_point.json, the sweep's record of the point (what runs.h's load_run reads back for a
// point that failed before writing summary.json).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mpicnn::recommend::sweep {

// A bad grid file: the message is one line "FILE:LINE: reason" (or "FILE: reason").
struct GridError {
  std::string message;
};

// One configuration of the grid, as the file gave it.
struct GridPoint {
  std::string block;  // its [block] name; "" for the lines before any block
  int ranks = 1;      // MPI ranks (the sweep's own key; not a ./train option)
  // ./train long option names and values, in the order the file first named the keys.
  std::vector<std::pair<std::string, std::string>> options;
  // "FILE:LINE" of each key's line (the block's line for "[block]"), for errors.
  std::map<std::string, std::string> where;
};

// Every point of the grid file: the product of each [block] (over the top section's keys
// overridden by the block's), or of the top section when there are no blocks. Throws GridError,
// also for a key that is not one of ./train's options (naming the nearest that is).
std::vector<GridPoint> read_grid(const std::string& path);

// A point ready to run: its name, its full ./train option record and the ./train arguments.
struct PointRun {
  GridPoint point;
  std::string name;  // the run directory's name (stable: derived from the configuration)
  // Every ./train option (long name -> value as text, like summary.json's "params"): ./train's
  // effective values.
  std::map<std::string, std::string> options;
  std::vector<std::string> train_args;  // "--key=value" for each option the grid set
};

// Each point ready to run; points that come out with the same name (the same configuration
// from two blocks) are kept once. Every point's options are parsed as ./train parses them
// before anything runs: one it would refuse is a GridError naming the line of the key whose
// value it refuses (or the point's block) and ./train's own line.
std::vector<PointRun> prepare_points(const std::vector<GridPoint>& points);

}  // namespace mpicnn::recommend::sweep
