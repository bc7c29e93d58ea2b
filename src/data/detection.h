// Object-detection datasets for Faster R-CNN: Pascal VOC XML folders (the Kaggle face-mask layout
// and the classic VOC one), COCO instances JSON, the horizontal flip of images with their boxes,
// and a seeded synthetic shapes set written in the face-mask layout. Not a loader or batcher:
// this turns files into per-image box lists and pixels; batching, resizing and anchors live elsewhere.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"

namespace mpicnn::data {

// One image and its objects. Boxes are x1 y1 x2 y2 in pixels, taken from the file as they are:
// Pascal VOC's values are 1-based pixel indices, and like torchvision's VOC tutorials and the
// face-mask notebook we use them unchanged as corners (no -1), so a VOC box is read exactly as
// torchvision's users read it. COCO's [x, y, w, h] becomes [x, y, x + w, y + h].
struct DetectionSample {
  std::string image;                        // path of the image file
  int64_t width = 0, height = 0;            // as the annotation says
  std::vector<std::array<float, 4>> boxes;  // (n, 4) x1 y1 x2 y2
  std::vector<int32_t> labels;              // (n) in 1..num_classes; 0 is background, as torchvision
  std::vector<uint8_t> difficult;           // (n) VOC <difficult>, 0 or 1 (always 0 for COCO)
};

struct DetectionSet {
  std::vector<std::string> classes;     // label k is classes[k - 1]
  std::vector<DetectionSample> samples;
  // skip_bad: annotation files (or COCO images) and single objects left out, with one line each
  // in `messages` saying which and why. COCO iscrowd annotations are dropped always, and counted
  // apart: they are not errors.
  size_t skipped_files = 0, skipped_objects = 0, crowd_dropped = 0;
  std::vector<std::string> messages;
  size_t skipped() const { return skipped_files + skipped_objects; }
  size_t num_objects() const;
};

// A Pascal VOC folder: DIR/images + DIR/annotations (Kaggle face-mask) or DIR/JPEGImages +
// DIR/Annotations (VOC2007/2012). Every *.xml of the annotation folder, sorted by name, or with
// `image_set` the names listed in DIR/ImageSets/Main/<image_set>.txt, in the list's order.
// `classes` fixes the label order (an object of another class is bad); empty collects the names
// found, sorted. Bad input is an Error naming the XML file (and the object, counted from 1):
// malformed XML, a missing <filename>, <size> or <bndbox> field, a non-number, a box with
// xmax <= xmin or ymax <= ymin or outside [0, width] x [0, height], an unknown class, an image
// file that is not there. With skip_bad the bad object (or, for file-level faults, the file) is
// left out and counted instead. An image whose objects are all left out stays, with no boxes
// (torchvision's Faster R-CNN trains on images without objects as negatives).
DetectionSet read_voc_folder(const std::string& dir, const std::vector<std::string>& classes = {},
                             bool skip_bad = false, const std::string& image_set = "");

// COCO instances JSON (images, annotations, categories); image files are image_dir/file_name.
// Classes are the categories in id order, labels remapped to 1..K (COCO's ids have gaps).
// Samples in image-id order as torchvision's CocoDetection, each image's boxes in file order;
// images without annotations stay. Errors name the JSON file and the annotation (index in the
// array, and its id): unknown image or category id, a bbox that is not 4 numbers, w or h <= 0, a
// box outside the image by more than kCocoEdgeSlack pixels (within it, clamped to the image as
// torchvision's reference does), a duplicate id, a missing image file. skip_bad as above.
inline constexpr float kCocoEdgeSlack = 1.0f;
DetectionSet read_coco_json(const std::string& json_path, const std::string& image_dir, bool skip_bad = false);

// In place, as torchvision's detection reference RandomHorizontalFlip:
// x1' = W - x2, x2' = W - x1 (pixel-edge coordinates, so flipping twice is the identity).
void hflip_boxes(float* boxes /* (n, 4) */, int64_t n, float width);

// The sample's image as float RGB in [0, 1] (byte / 255, torchvision's to_tensor), mirrored
// left-right when `flip`, with its boxes flipped to match. The decoded size must be the
// annotation's (an Error naming the image otherwise): boxes are only right for that size.
void load_detection_image(float* pixels /* (3, H, W) */, float* boxes /* (n, 4) */, const DetectionSample& s,
                          bool flip);

struct DetectionImage {
  int64_t height = 0, width = 0;
  std::vector<float> pixels;                // (3, H, W)
  std::vector<std::array<float, 4>> boxes;  // (n, 4)
};
DetectionImage load_detection_image(const DetectionSample& s, bool flip);

// ---- synthetic shapes (detection_synth.cpp) ---------------------------------------------------

// Shapes the generator can draw; a class is one shape.
inline const std::vector<std::string>& synthetic_shapes() {
  static const std::vector<std::string> shapes = {"circle", "square", "triangle", "diamond", "cross", "ring"};
  return shapes;
}

struct SyntheticDetectionOptions {
  std::string out_dir;   // gets images/NNNNN.<format> and annotations/NNNNN.xml (Pascal VOC)
  size_t count = 100;
  uint64_t seed = 0;
  int min_size = 160, max_size = 320;  // each image side drawn in [min_size, max_size]
  std::vector<std::string> classes = {"circle", "square", "triangle"};  // from synthetic_shapes()
  int max_objects = 6;                 // 1..max_objects shapes per image (fewer if they do not fit)
  int min_object = 16;                 // smallest shape side in pixels
  std::string format = "jpg";          // jpg (libjpeg, quality 95) or png
  bool force = false;                  // write into a non-empty folder (replacing an earlier output)
  int threads = 0;                     // writers; 0: writer_threads()
};

// One rendered image and its objects before it is written (the tests check pixels against boxes).
struct SyntheticDetectionImage {
  Image image;                                 // (H, W, 3)
  std::vector<std::array<float, 4>> boxes;     // tight: pixel-edge extent of the drawn shape
  std::vector<int32_t> labels;                 // 1..classes
  std::vector<std::array<uint8_t, 3>> colours; // fill of each shape
};

// Image `index` of the set `opt` describes: a pure function of (seed, index, sizes, classes).
SyntheticDetectionImage render_synthetic_detection_image(const SyntheticDetectionOptions& opt, size_t index);

// Renders and writes the whole set, returning what was written (image paths, sizes, boxes, labels,
// classes in the order given). Same options, same bytes. Boxes are pixel-edge corners (a shape in
// columns 10..19 has xmin 10, xmax 20) kept at least one pixel off the border, so they read back
// unchanged with read_voc_folder and are also valid as 1-based VOC indices. For a test set,
// generate another folder with another seed.
DetectionSet make_synthetic_detection_set(const SyntheticDetectionOptions& opt);

// Where ./train --task detection and ./pipeline_eval find a detection set at `path`: a COCO
// instances .json file (its images in the file's folder), a folder holding exactly one *.json
// and no annotations/ or Annotations/ folder (a COCO export with its images beside it), else a
// Pascal VOC folder. `classes` (non-empty) are the names the set must have, as `whose` calls
// them ("the training data's", "the checkpoint's"): a VOC folder is read with them, a COCO
// file's categories must equal them. Errors start with `flag` (the option that named the
// path). `description` gets "COCO JSON FILE" or "Pascal VOC folder DIR".
struct OpenedDetectionSet {
  DetectionSet set;
  std::string kind;         // "voc" or "coco"
  std::string description;
};
OpenedDetectionSet open_detection_set(const std::string& path, const std::vector<std::string>& classes,
                                      bool skip_bad, const std::string& flag, const std::string& whose);

// "circle,square": a comma list of distinct shape names; errors name `flag`.
std::vector<std::string> parse_shape_list(const std::string& text, const std::string& flag);

}  // namespace mpicnn::data
