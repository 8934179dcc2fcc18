// wds/wds.hpp: everything in one include.
#pragma once

#include "wds/brace.hpp"
#include "wds/bytes.hpp"
#include "wds/distributed.hpp"
#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/random.hpp"
#include "wds/sample.hpp"
#include "wds/sampler.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"
#include "wds/split.hpp"
#include "wds/stages.hpp"
#include "wds/tar_reader.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"
#include "wds/webdataset.hpp"
