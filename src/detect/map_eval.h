// Detection metrics: PASCAL VOC AP@0.5 (VOC2010+ devkit rules) and COCO-style AP over IoU
// .50:.05:.95 (pycocotools COCOeval, bbox, area range 'all'), per class and averaged, plus the
// per-class table the trainer prints. Not a dataset reader, not a results-file writer.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace mpicnn::detect {

// Boxes are (x1, y1, x2, y2) in continuous coordinates, as torchvision and COCO use them. Both
// metrics take IoU = intersection / union on these coordinates, computed in double: unlike the
// VOC devkit, widths get no "+1 pixel" (a box from 10 to 20 is 10 wide, not 11).
struct GroundTruth {
  int64_t image = 0;
  int32_t label = 0;
  float box[4] = {0, 0, 0, 0};
  // VOC: a detection whose best match is a difficult box is neither a true nor a false positive,
  // and difficult boxes do not count toward recall. COCO: the same, through pycocotools' own
  // mechanism for an ignored (out-of-area-range) box: it absorbs at most one detection per
  // threshold, which is then ignored. pycocotools itself has no such flag.
  bool difficult = false;
  // COCO crowd region, as pycocotools: ignored, scored against a detection by intersection over
  // the detection's area, and able to absorb any number of detections. VOC has no crowds: there
  // a crowd box counts as difficult (IoU as usual).
  bool iscrowd = false;
};

struct Detection {
  int64_t image = 0;
  int32_t label = 0;
  float box[4] = {0, 0, 0, 0};
  float score = 0;  // must be finite
};

struct MapOptions {
  // COCO: detections kept per (image, class), highest scores first (pycocotools' maxDets applies
  // per image and category). VOC keeps every detection.
  int64_t max_dets = 100;
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct ClassAp {
  int32_t label = 0;
  int64_t gt_count = 0;   // counted ground truth: neither difficult nor crowd
  int64_t det_count = 0;  // detections with this label (before the COCO per-image cap)
  // NaN when gt_count is 0: such a class has no AP and is left out of every mean.
  double ap50_voc = kNaN;   // VOC: IoU >= 0.5, all-point interpolation
  double ap_coco = kNaN;    // COCO: mean of the 10 thresholds' 101-point APs
  double ap50_coco = kNaN;  // COCO at IoU .50
  double ap75_coco = kNaN;  // COCO at IoU .75
};

struct MapResult {
  std::vector<ClassAp> classes;    // one per label, 0 .. num_classes-1
  int64_t classes_evaluated = 0;   // classes with gt_count > 0, the ones averaged below
  double map50_voc = kNaN;         // means over those classes; NaN when there are none
  double map_coco = kNaN;
  double map50_coco = kNaN;
  double map75_coco = kNaN;
};

// Scores every detection against the ground truth of its image and label; labels run from 0 to
// num_classes-1 (a label with no ground truth, such as torchvision's background 0, just gets NaN).
// An image id that appears only among detections is an image without objects: all its
// detections are false positives. Throws mpicnn::Error naming the offending entry and its image
// for a label out of range, a non-finite coordinate or score, or a box with x2 < x1 or y2 < y1.
//
// VOC (devkit VOCevaldet.m): per class, detections by decreasing score (equal scores keep input
// order); each takes the ground truth of its image with the highest IoU (first one on ties,
// matched or not) and is a true positive when that IoU >= 0.5 (the devkit's `ovmax >= minoverlap`;
// the python ports in py-faster-rcnn/detectron use `>`) and the box is not yet taken, ignored
// when the box is difficult, and a false positive otherwise. AP is the area under the monotone
// precision envelope (VOC2010+ all-point interpolation).
//
// COCO (pycocotools evaluateImg + accumulate): per (image, class) the max_dets best detections;
// per IoU threshold each detection, by decreasing score, takes the still-free ground truth with
// the highest IoU >= threshold (last one on ties; counted boxes before ignored ones, as
// pycocotools sorts them); precision tp / (tp + fp + 2^-52) after a global stable sort by score
// (images in increasing id), made monotone from the right and read at recall 0, .01, ..., 1.
MapResult evaluate_detections(const std::vector<GroundTruth>& gts, const std::vector<Detection>& dets,
                              int32_t num_classes, const MapOptions& options = {});

// The thresholds exactly as pycocotools makes them with numpy 1.24: np.linspace(.5, .95, 10)
// (i * ((0.95 - 0.5) / 9) + 0.5, the last one 0.95 exactly: the 9th is 0.8999999999999999) and
// np.linspace(0, 1, 101) (i * 0.01, the last one 1).
const std::array<double, 10>& coco_iou_thresholds();
const std::array<double, 101>& coco_recall_thresholds();

// A text table, one row per class that has ground truth or detections: class name (or label when
// names is empty), GT count, VOC AP@.5, COCO AP@[.5:.95] ("-" where there is no AP), then a line
// with the four means. names, when given, has one entry per class.
std::string format_map_table(const MapResult& result, const std::vector<std::string>& names = {});

}  // namespace mpicnn::detect
