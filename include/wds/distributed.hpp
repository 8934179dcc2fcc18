// wds/distributed.hpp: who this process is in a distributed job.
//
//   wds::DistributedInfo me = wds::detect_distributed();   // rank 3 of 8, from "openmpi"
//
// The rank and world size come from the first of these that is present (`source` names it):
//   1. explicit options (DistributedOptions::rank / world_size, both or neither) "options"
//   2. torchrun:  RANK, WORLD_SIZE (and LOCAL_RANK)                              "torchrun"
//   3. Open MPI:  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE                     "openmpi"
//                 (and OMPI_COMM_WORLD_LOCAL_RANK)
//   4. PMI (MPICH, Intel MPI): PMI_RANK, PMI_SIZE                                "pmi"
//   5. SLURM:     SLURM_PROCID, SLURM_NTASKS (and SLURM_LOCALID)                 "slurm"
//   6. Paddle:    PADDLE_TRAINER_ID, and PADDLE_TRAINERS_NUM or PADDLE_TRAINERS  "paddle"
//                 (one whole number: the number of trainers, as in the fluid documents; else a
//                 comma-separated list of endpoints, whose length is the world size); if both
//                 are set they must agree
//   7. Paddle v2 cluster training: PADDLE_INIT_TRAINER_ID,                       "paddle_v2"
//                 PADDLE_INIT_NUM_GRADIENT_SERVERS (the number of trainers;
//                 PADDLE_INIT_TRAINER_COUNT is threads per trainer and is not read)
// else rank 0 of 1 ("none"). A source counts as present when any of its rank or size variables is
// set; then all of them must be, and valid. Sources below the first present one are not read.
// Launchers come before frameworks because a framework's variables are often exported by hand
// or by a script that runs under a launcher (Paddle v2's MPI scripts copy OMPI_COMM_WORLD_*).
//
// Precedence of all sources, per setting (the first given wins; the ones below are not read):
//
//                rank and world size             split policy (wds/split.hpp)     seed
//   options      DistributedOptions, --rank      WebDatasetOptions::split_policy, options' seed,
//                and --world-size                SplitOptions::policy,            --seed
//                                                --split-policy
//   WDS_*        (none: the launcher knows)      WDS_SPLIT_POLICY                 WDS_SEED
//   launchers    torchrun, Open MPI, PMI, SLURM  (none)                           (none)
//   frameworks   Paddle, then Paddle v2          Whale: WHALE_UNBALANCED_IO_SLICING,
//                                                then WHALE_DROP_LAST_FILES, else
//                                                Whale's default
//   else         rank 0 of 1                     even                             0
//
// The settings are independent: Paddle may give the rank while Whale's variables or
// WDS_SPLIT_POLICY give the policy. Whale's default depends on the world size found here
// (wds::plan_split reports the policy, its source and the shards each rank reads).
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
  // "options", "torchrun", "openmpi", "pmi", "slurm", "paddle", "paddle_v2", "none"
  std::string source = "none";
};

DistributedInfo detect_distributed(const DistributedOptions& options = {});

}  // namespace wds
