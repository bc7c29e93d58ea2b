// trainer.json, a checkpoint's record of the run (TrainerState), as JSON and back: written
// with its own CRC-32 over the rest, read with the CRC checked and every field validated (each
// error names the file and the field). Internal to src/io: checkpoint.cpp writes and reads it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace mpicnn::trainer_record {

// The state as trainer.json holds it, without its "crc32" field.
nlohmann::json to_json(const TrainerState& s);
// The CRC-32 over the compact dump of a trainer.json without its "crc32" field.
uint32_t own_crc(const nlohmann::json& without_crc);
// trainer.json parsed and version-checked; the state plus its "files" record.
std::pair<TrainerState, nlohmann::json> parse(const std::string& path);
// A checkpoint file opened and checked against its entry in the "files" record (bytes and
// CRC-32): a replaced or corrupt file is an error naming it and `trainer_path`.
SafetensorsReader open_recorded(const std::filesystem::path& file, const nlohmann::json& files,
                                const std::string& trainer_path);

}  // namespace mpicnn::trainer_record
