// wds/wds.hpp: everything in one include.
#pragma once

#include "wds/brace.hpp"
#include "wds/bytes.hpp"
#include "wds/error.hpp"
#include "wds/sample.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"
#include "wds/split.hpp"
#include "wds/tar_reader.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"
