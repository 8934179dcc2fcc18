// wds/distributed.hpp: who this process is in a distributed job.
//
//   wds::DistributedInfo me = wds::detect_distributed();   // rank 3 of 8, from "openmpi"
//
// The rank and world size come from the first of these that is present:
//   1. explicit options (DistributedOptions::rank / world_size, both or neither);
//   2. torchrun:  RANK, WORLD_SIZE (and LOCAL_RANK);
//   3. Open MPI:  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (and OMPI_COMM_WORLD_LOCAL_RANK);
//   4. PMI (MPICH, Intel MPI): PMI_RANK, PMI_SIZE;
//   5. SLURM:     SLURM_PROCID, SLURM_NTASKS (and SLURM_LOCALID);
//   6. Paddle:    PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, or PADDLE_TRAINERS (a comma-separated
//      list of endpoints, whose length is the world size; if both are set they must agree);
// else rank 0 of 1. A source counts as present when any of its variables is set; then all of its
// required ones must be, and valid.
//
// Errors: invalid_argument Error naming the variable and its value for a value that is not a
// whole number, a world size < 1, a rank outside [0, world size), a source with only some of its
// required variables, or a disagreement within one source.
// Thread safety: reads the environment; safe to call concurrently with other readers.
#pragma once

#include <optional>
#include <string>

namespace wds {

struct DistributedOptions {
  std::optional<int> rank;
  std::optional<int> world_size;
};

struct DistributedInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // 0 when the source does not say
  std::string source =
      "none";  // "options", "torchrun", "openmpi", "pmi", "slurm", "paddle", "none"
};

DistributedInfo detect_distributed(const DistributedOptions& options = {});

}  // namespace wds
