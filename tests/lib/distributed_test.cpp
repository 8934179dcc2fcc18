// detect_distributed: sources, precedence, local rank and every error, against a controlled env.
#include "wds/distributed.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/env.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

// Every variable the header lists; the tests own all of them.
constexpr const char* kVars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "PADDLE_TRAINER_ID",
    "PADDLE_TRAINERS_NUM",
    "PADDLE_TRAINERS",
    "PADDLE_INIT_TRAINER_ID",
    "PADDLE_INIT_NUM_GRADIENT_SERVERS",
    "PADDLE_INIT_TRAINER_COUNT",
};

// Clears kVars (and any extra names) for its lifetime and puts back what was there before, so
// tests neither see the machine's launcher (CI under SLURM, say) nor leak into each other.
class CleanEnv : public test::ClearedEnv {
 public:
  explicit CleanEnv(std::initializer_list<const char*> extra = {}) : ClearedEnv(kVars, extra) {}
};

class Distributed : public ::testing::Test {
 protected:
  static void set(const char* name, const std::string& value) {
    ASSERT_EQ(::setenv(name, value.c_str(), 1), 0) << name;
  }
  static void unset(const char* name) { ::unsetenv(name); }

  CleanEnv env_;
};

// The cause of the Error detect_distributed must throw; checks the parts every error shares.
std::string cause_of(const DistributedOptions& options = {}) {
  try {
    DistributedInfo info = detect_distributed(options);
    ADD_FAILURE() << "no error; got rank " << info.rank << " of " << info.world_size << " from "
                  << info.source;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_TRUE(e.url().empty()) << e.what();
    EXPECT_TRUE(e.member().empty()) << e.what();
    EXPECT_FALSE(e.retryable());
    return e.cause();
  }
  return "";
}

bool mentions(const std::string& cause, const std::string& text) {
  return cause.find(text) != std::string::npos;
}

void expect_info(const DistributedInfo& info, int rank, int world_size, int local_rank,
                 const std::string& source) {
  EXPECT_EQ(info.rank, rank);
  EXPECT_EQ(info.world_size, world_size);
  EXPECT_EQ(info.local_rank, local_rank);
  EXPECT_EQ(info.source, source);
}

struct Pair {
  const char* source;
  const char* rank;
  const char* size;
  const char* local;  // nullptr: the source has no local rank variable
  const char* launcher;
};

constexpr Pair kPairs[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "Open MPI"},
    {"pmi", "PMI_RANK", "PMI_SIZE", nullptr, "the PMI launcher"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "srun"},
    {"paddle_v2", "PADDLE_INIT_TRAINER_ID", "PADDLE_INIT_NUM_GRADIENT_SERVERS", nullptr,
     "Paddle v2 cluster training"},
};

// ---------------------------------------------------------------------------------------------
// The environment helper itself.

TEST(CleanEnvTest, ClearsAndRestores) {
  CleanEnv outer({"WDS_TEST_EXTRA"});  // keeps the machine's own values out of harm's way
  ::setenv("RANK", "machine-value", 1);
  ::setenv("WDS_TEST_EXTRA", "kept", 1);
  ::unsetenv("WORLD_SIZE");
  {
    CleanEnv env({"WDS_TEST_EXTRA"});
    EXPECT_EQ(std::getenv("RANK"), nullptr);
    EXPECT_EQ(std::getenv("WDS_TEST_EXTRA"), nullptr);
    ::setenv("RANK", "7", 1);
    ::setenv("WORLD_SIZE", "8", 1);
    ::unsetenv("WDS_TEST_EXTRA");
  }
  ASSERT_NE(std::getenv("RANK"), nullptr);
  EXPECT_STREQ(std::getenv("RANK"), "machine-value");
  EXPECT_EQ(std::getenv("WORLD_SIZE"), nullptr);
  ASSERT_NE(std::getenv("WDS_TEST_EXTRA"), nullptr);
  EXPECT_STREQ(std::getenv("WDS_TEST_EXTRA"), "kept");
}

// ---------------------------------------------------------------------------------------------
// No source.

TEST_F(Distributed, NoneWhenNothingIsSet) {
  expect_info(detect_distributed(), 0, 1, 0, "none");
}

TEST_F(Distributed, UnrelatedVariablesDoNotCount) {
  CleanEnv unrelated({"NODE_RANK", "MASTER_ADDR", "SLURM_JOB_ID", "PADDLE_CURRENT_ENDPOINT"});
  set("NODE_RANK", "3");
  set("MASTER_ADDR", "10.0.0.1");
  set("SLURM_JOB_ID", "1234");
  set("PADDLE_CURRENT_ENDPOINT", "10.0.0.1:6170");
  set("PADDLE_INIT_TRAINER_COUNT", "8");  // threads within one trainer, not trainers
  expect_info(detect_distributed(), 0, 1, 0, "none");
}

// ---------------------------------------------------------------------------------------------
// Each source on its own.

TEST_F(Distributed, Options) {
  DistributedOptions o;
  o.rank = 2;
  o.world_size = 5;
  expect_info(detect_distributed(o), 2, 5, 0, "options");
  o.rank = 0;
  o.world_size = 1;
  expect_info(detect_distributed(o), 0, 1, 0, "options");
}

TEST_F(Distributed, Torchrun) {
  set("RANK", "3");
  set("WORLD_SIZE", "8");
  set("LOCAL_RANK", "1");
  expect_info(detect_distributed(), 3, 8, 1, "torchrun");
}

TEST_F(Distributed, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "5");
  set("OMPI_COMM_WORLD_SIZE", "16");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  expect_info(detect_distributed(), 5, 16, 2, "openmpi");
}

TEST_F(Distributed, Pmi) {
  set("PMI_RANK", "6");
  set("PMI_SIZE", "7");
  expect_info(detect_distributed(), 6, 7, 0, "pmi");
}

TEST_F(Distributed, Slurm) {
  set("SLURM_PROCID", "9");
  set("SLURM_NTASKS", "12");
  set("SLURM_LOCALID", "3");
  expect_info(detect_distributed(), 9, 12, 3, "slurm");
}

TEST_F(Distributed, LocalRankIsZeroWhenTheSourceDoesNotSayIt) {
  for (const Pair& p : kPairs) {
    SCOPED_TRACE(p.source);
    CleanEnv inner;
    set(p.rank, "1");
    set(p.size, "4");
    expect_info(detect_distributed(), 1, 4, 0, p.source);
  }
}

TEST_F(Distributed, LocalRankComesOnlyFromTheChosenSource) {
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  set("SLURM_LOCALID", "5");  // a lower source's local rank is not borrowed
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS_NUM", "1");
  expect_info(detect_distributed(), 1, 2, 0, "torchrun");
}

TEST_F(Distributed, LocalRankMayExceedRankAndBeZero) {
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  expect_info(detect_distributed(), 0, 4, 3, "openmpi");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  expect_info(detect_distributed(), 0, 4, 0, "openmpi");
}

TEST_F(Distributed, PaddleWithTrainersNum) {
  set("PADDLE_TRAINER_ID", "1");
  set("PADDLE_TRAINERS_NUM", "4");
  expect_info(detect_distributed(), 1, 4, 0, "paddle");
}

TEST_F(Distributed, PaddleCountsTheEndpointList) {
  set("PADDLE_TRAINER_ID", "2");
  set("PADDLE_TRAINERS", "10.0.0.1:6170,10.0.0.2:6170,10.0.0.3:6170");
  expect_info(detect_distributed(), 2, 3, 0, "paddle");
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS", "10.0.0.1:6170");
  expect_info(detect_distributed(), 0, 1, 0, "paddle");
}

// The fluid documents: `trainers = int(os.getenv("PADDLE_TRAINERS", "1"))`. Read as a list of
// one endpoint, "4" made a world of 1 and trainer 1 an error.
TEST_F(Distributed, PaddleTrainersAsACountWasReadAsOneEndpoint) {
  set("PADDLE_TRAINER_ID", "1");
  set("PADDLE_TRAINERS", "4");
  expect_info(detect_distributed(), 1, 4, 0, "paddle");
  set("PADDLE_TRAINER_ID", "11");
  set("PADDLE_TRAINERS", "012");  // a whole number, as parse_int reads it
  expect_info(detect_distributed(), 11, 12, 0, "paddle");
  set("PADDLE_TRAINERS_NUM", "12");  // both, agreeing
  expect_info(detect_distributed(), 11, 12, 0, "paddle");
}

// Paddle v2's cluster scripts export PADDLE_INIT_TRAINER_ID and PADDLE_INIT_NUM_GRADIENT_SERVERS;
// ignored, every trainer was rank 0 of 1 and read every shard.
TEST_F(Distributed, PaddleV2VariablesWereIgnoredSoEveryTrainerReadEveryShard) {
  set("PADDLE_INIT_TRAINER_ID", "2");
  set("PADDLE_INIT_NUM_GRADIENT_SERVERS", "4");
  expect_info(detect_distributed(), 2, 4, 0, "paddle_v2");
  set("PADDLE_INIT_TRAINER_COUNT", "8");  // threads per trainer: not the world size
  expect_info(detect_distributed(), 2, 4, 0, "paddle_v2");
  set("PADDLE_INIT_TRAINER_ID", "0");
  set("PADDLE_INIT_NUM_GRADIENT_SERVERS", "1");
  expect_info(detect_distributed(), 0, 1, 0, "paddle_v2");
}

TEST_F(Distributed, PaddleV2TrainerCountAloneIsNoSource) {
  set("PADDLE_INIT_TRAINER_COUNT", "4");
  expect_info(detect_distributed(), 0, 1, 0, "none");
  set("PADDLE_INIT_TRAINER_ID", "1");  // with the trainer id, the number of trainers is missing
  EXPECT_EQ(cause_of(),
            "PADDLE_INIT_TRAINER_ID is set but PADDLE_INIT_NUM_GRADIENT_SERVERS is not (Paddle "
            "v2 cluster training sets both)");
}

TEST_F(Distributed, PaddleWithBothThatAgree) {
  set("PADDLE_TRAINER_ID", "1");
  set("PADDLE_TRAINERS_NUM", "2");
  set("PADDLE_TRAINERS", "10.0.0.1:6170,10.0.0.2:6170");
  expect_info(detect_distributed(), 1, 2, 0, "paddle");
}

TEST_F(Distributed, LargestValues) {
  set("RANK", "2147483646");
  set("WORLD_SIZE", "2147483647");
  set("LOCAL_RANK", "2147483647");
  expect_info(detect_distributed(), 2147483646, 2147483647, 2147483647, "torchrun");
}

TEST_F(Distributed, LeadingZerosAreStillWholeNumbers) {
  set("PMI_RANK", "007");
  set("PMI_SIZE", "010");
  expect_info(detect_distributed(), 7, 10, 0, "pmi");
}

// ---------------------------------------------------------------------------------------------
// Precedence.

TEST_F(Distributed, EachSourceWinsOverTheOnesBelowIt) {
  set("RANK", "1");
  set("WORLD_SIZE", "10");
  set("LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_RANK", "2");
  set("OMPI_COMM_WORLD_SIZE", "20");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  set("PMI_RANK", "3");
  set("PMI_SIZE", "30");
  set("SLURM_PROCID", "4");
  set("SLURM_NTASKS", "40");
  set("SLURM_LOCALID", "4");
  set("PADDLE_TRAINER_ID", "5");
  set("PADDLE_TRAINERS_NUM", "50");
  set("PADDLE_INIT_TRAINER_ID", "6");
  set("PADDLE_INIT_NUM_GRADIENT_SERVERS", "60");

  DistributedOptions o;
  o.rank = 0;
  o.world_size = 100;
  expect_info(detect_distributed(o), 0, 100, 0, "options");

  expect_info(detect_distributed(), 1, 10, 1, "torchrun");
  unset("RANK");
  unset("WORLD_SIZE");
  unset("LOCAL_RANK");
  expect_info(detect_distributed(), 2, 20, 2, "openmpi");
  unset("OMPI_COMM_WORLD_RANK");
  unset("OMPI_COMM_WORLD_SIZE");
  unset("OMPI_COMM_WORLD_LOCAL_RANK");
  expect_info(detect_distributed(), 3, 30, 0, "pmi");
  unset("PMI_RANK");
  unset("PMI_SIZE");
  expect_info(detect_distributed(), 4, 40, 4, "slurm");
  unset("SLURM_PROCID");
  unset("SLURM_NTASKS");
  unset("SLURM_LOCALID");
  expect_info(detect_distributed(), 5, 50, 0, "paddle");
  unset("PADDLE_TRAINER_ID");
  unset("PADDLE_TRAINERS_NUM");
  expect_info(detect_distributed(), 6, 60, 0, "paddle_v2");
  unset("PADDLE_INIT_TRAINER_ID");
  unset("PADDLE_INIT_NUM_GRADIENT_SERVERS");
  expect_info(detect_distributed(), 0, 1, 0, "none");
}

TEST_F(Distributed, OptionsIgnoreEvenABrokenEnvironment) {
  set("RANK", "x");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("PADDLE_TRAINERS", "a,,b");
  DistributedOptions o;
  o.rank = 3;
  o.world_size = 4;
  expect_info(detect_distributed(o), 3, 4, 0, "options");
}

TEST_F(Distributed, LowerSourcesAreNotValidatedOnceOneIsPresent) {
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_RANK", "not-a-number");
  set("PMI_SIZE", "0");
  set("SLURM_LOCALID", "-1");
  set("PADDLE_TRAINERS", ",");
  set("PADDLE_INIT_TRAINER_ID", "x");
  expect_info(detect_distributed(), 0, 2, 0, "torchrun");
  // Nor is Paddle v2 once Paddle's fluid variables are there.
  CleanEnv inner;
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS", "2");
  set("PADDLE_INIT_NUM_GRADIENT_SERVERS", "0");
  expect_info(detect_distributed(), 0, 2, 0, "paddle");
}

TEST_F(Distributed, AHigherSourceThatIsBrokenIsAnErrorNotSkipped) {
  set("RANK", "1");  // torchrun present but incomplete
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_EQ(cause_of(), "RANK is set but WORLD_SIZE is not (torchrun sets both)");
}

TEST_F(Distributed, ALocalRankVariableAloneDoesNotMakeItsSourcePresent) {
  set("LOCAL_RANK", "0");  // exported by hand in a SLURM job script
  set("SLURM_PROCID", "1");
  set("SLURM_NTASKS", "2");
  set("SLURM_LOCALID", "1");
  DistributedInfo info = detect_distributed();
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.local_rank, 1);
}

// ---------------------------------------------------------------------------------------------
// Option errors.

TEST_F(Distributed, OptionsNeedBothOrNeither) {
  set("RANK", "0");  // a valid environment does not fill in the missing option
  set("WORLD_SIZE", "4");
  DistributedOptions only_rank;
  only_rank.rank = 1;
  EXPECT_EQ(cause_of(only_rank),
            "DistributedOptions::rank is set but DistributedOptions::world_size is not "
            "(give both or neither)");
  DistributedOptions only_size;
  only_size.world_size = 4;
  EXPECT_EQ(cause_of(only_size),
            "DistributedOptions::world_size is set but DistributedOptions::rank is not "
            "(give both or neither)");
}

TEST_F(Distributed, OptionsAreValidated) {
  DistributedOptions o;
  o.rank = 0;
  o.world_size = 0;
  EXPECT_EQ(cause_of(o), "DistributedOptions::world_size=0 is less than 1");
  o.world_size = -3;
  EXPECT_EQ(cause_of(o), "DistributedOptions::world_size=-3 is less than 1");
  o.rank = -1;
  o.world_size = 4;
  EXPECT_EQ(cause_of(o), "DistributedOptions::rank=-1 is negative");
  o.rank = 4;
  EXPECT_EQ(cause_of(o),
            "DistributedOptions::rank=4 is not below DistributedOptions::world_size=4");
  o.rank = 1000;
  EXPECT_EQ(cause_of(o),
            "DistributedOptions::rank=1000 is not below DistributedOptions::world_size=4");
}

// ---------------------------------------------------------------------------------------------
// Errors of the sources with a rank and a size variable, run for each of them.

TEST_F(Distributed, PartialSourcesAreErrors) {
  for (const Pair& p : kPairs) {
    SCOPED_TRACE(p.source);
    const std::string launcher = p.launcher;
    {
      CleanEnv inner;
      set(p.rank, "0");
      EXPECT_EQ(cause_of(), std::string(p.rank) + " is set but " + p.size + " is not (" + launcher +
                                " sets both)");
      if (p.local) {
        set(p.local, "0");  // the local rank does not stand in for the size
        EXPECT_EQ(cause_of(), std::string(p.rank) + " is set but " + p.size + " is not (" +
                                  launcher + " sets both)");
      }
    }
    {
      CleanEnv inner;
      set(p.size, "4");
      EXPECT_EQ(cause_of(), std::string(p.size) + " is set but " + p.rank + " is not (" + launcher +
                                " sets both)");
    }
    if (p.local) {
      CleanEnv inner;
      set(p.local, "0");  // alone, it is ignored
      EXPECT_EQ(detect_distributed().source, "none");
    }
  }
}

TEST_F(Distributed, ValuesThatAreNotWholeNumbers) {
  const std::vector<std::string> bad = {
      "x",   "",    " ",   " 1",  "1 ", "\t1", "1\n", "+1",
      "1.0", "1e3", "0x1", "1,2", "-",  "--1", "1-",  "٣"};  // Arabic-Indic digit three
  for (const Pair& p : kPairs) {
    for (const char* var : {p.rank, p.size, p.local}) {
      if (!var) continue;
      for (const std::string& value : bad) {
        SCOPED_TRACE(std::string(var) + "='" + value + "'");
        CleanEnv inner;
        set(p.rank, "0");
        set(p.size, "4");
        set(var, value);
        EXPECT_EQ(cause_of(), std::string(var) + "='" + value + "' is not a whole number");
      }
    }
  }
}

TEST_F(Distributed, ValuesThatOverflowInt) {
  const std::vector<std::string> huge = {"2147483648", "-2147483649", "99999999999999999999"};
  for (const Pair& p : kPairs) {
    for (const char* var : {p.rank, p.size, p.local}) {
      if (!var) continue;
      for (const std::string& value : huge) {
        SCOPED_TRACE(std::string(var) + "=" + value);
        CleanEnv inner;
        set(p.rank, "0");
        set(p.size, "4");
        set(var, value);
        EXPECT_EQ(cause_of(), std::string(var) + "='" + value + "' does not fit in an int");
      }
    }
  }
}

TEST_F(Distributed, OverflowFollowedByGarbageIsNotAWholeNumber) {
  set("RANK", "0");
  set("WORLD_SIZE", "99999999999x");
  EXPECT_EQ(cause_of(), "WORLD_SIZE='99999999999x' is not a whole number");
}

TEST_F(Distributed, WorldSizeBelowOne) {
  for (const Pair& p : kPairs) {
    for (const char* size : {"0", "-1", "-2147483648"}) {
      SCOPED_TRACE(std::string(p.size) + "=" + size);
      CleanEnv inner;
      set(p.rank, "0");
      set(p.size, size);
      EXPECT_EQ(cause_of(), std::string(p.size) + "=" + size + " is less than 1");
    }
  }
}

TEST_F(Distributed, RankOutsideTheWorld) {
  for (const Pair& p : kPairs) {
    SCOPED_TRACE(p.source);
    CleanEnv inner;
    set(p.size, "4");
    set(p.rank, "-1");
    EXPECT_EQ(cause_of(), std::string(p.rank) + "=-1 is negative");
    set(p.rank, "4");
    EXPECT_EQ(cause_of(), std::string(p.rank) + "=4 is not below " + p.size + "=4");
    set(p.rank, "2147483647");
    EXPECT_EQ(cause_of(), std::string(p.rank) + "=2147483647 is not below " + p.size + "=4");
  }
}

TEST_F(Distributed, TheExamplesOfTheBrief) {
  set("OMPI_COMM_WORLD_RANK", "4");
  set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_EQ(cause_of(), "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4");
  set("RANK", "x");
  set("WORLD_SIZE", "4");
  EXPECT_EQ(cause_of(), "RANK='x' is not a whole number");
}

TEST_F(Distributed, NegativeLocalRank) {
  for (const Pair& p : kPairs) {
    if (!p.local) continue;
    SCOPED_TRACE(p.source);
    CleanEnv inner;
    set(p.rank, "0");
    set(p.size, "4");
    set(p.local, "-1");
    EXPECT_EQ(cause_of(), std::string(p.local) + "=-1 is negative");
  }
}

TEST_F(Distributed, PmiHasNoLocalRankVariableOfItsOwn) {
  set("PMI_RANK", "1");
  set("PMI_SIZE", "2");
  set("LOCAL_RANK", "1");  // torchrun's, and torchrun is not present: ignored
  DistributedInfo info = detect_distributed();
  EXPECT_EQ(info.source, "pmi");
  EXPECT_EQ(info.local_rank, 0);
}

// ---------------------------------------------------------------------------------------------
// Paddle errors.

TEST_F(Distributed, PaddleWithoutTrainerId) {
  set("PADDLE_TRAINERS_NUM", "2");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS_NUM is set but PADDLE_TRAINER_ID is not");
  unset("PADDLE_TRAINERS_NUM");
  set("PADDLE_TRAINERS", "a:1,b:1");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS is set but PADDLE_TRAINER_ID is not");
}

TEST_F(Distributed, PaddleWithoutWorldSize) {
  set("PADDLE_TRAINER_ID", "0");
  EXPECT_EQ(cause_of(),
            "PADDLE_TRAINER_ID is set but neither PADDLE_TRAINERS_NUM nor PADDLE_TRAINERS is");
}

TEST_F(Distributed, PaddleListAndCountDisagree) {
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS_NUM", "2");
  set("PADDLE_TRAINERS", "10.0.0.1:6170,10.0.0.2:6170,10.0.0.3:6170");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS lists 3 endpoints but PADDLE_TRAINERS_NUM=2");
  set("PADDLE_TRAINERS_NUM", "4");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS lists 3 endpoints but PADDLE_TRAINERS_NUM=4");
  set("PADDLE_TRAINERS", "10.0.0.1:6170");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS lists 1 endpoint but PADDLE_TRAINERS_NUM=4");
}

TEST_F(Distributed, PaddleEmptyEndpoints) {
  set("PADDLE_TRAINER_ID", "0");
  for (const char* list : {"", ",", "a:1,,b:1", ",a:1", "a:1,", "a:1,b:1,"}) {
    SCOPED_TRACE(list);
    set("PADDLE_TRAINERS", list);
    EXPECT_EQ(cause_of(), std::string("PADDLE_TRAINERS='") + list + "' has an empty endpoint");
  }
}

TEST_F(Distributed, PaddleNumbersAreValidated) {
  set("PADDLE_TRAINER_ID", "one");
  set("PADDLE_TRAINERS_NUM", "2");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINER_ID='one' is not a whole number");
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS_NUM", " 2");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS_NUM=' 2' is not a whole number");
  set("PADDLE_TRAINERS_NUM", "3000000000");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS_NUM='3000000000' does not fit in an int");
  set("PADDLE_TRAINERS_NUM", "0");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS_NUM=0 is less than 1");
  set("PADDLE_TRAINERS", "a:1");  // the count is checked before it is compared with the list
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS_NUM=0 is less than 1");
}

TEST_F(Distributed, PaddleTrainersCountIsValidated) {
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS", "0");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS=0 is less than 1");
  set("PADDLE_TRAINERS", "-2");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS=-2 is less than 1");
  set("PADDLE_TRAINERS", "99999999999");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS='99999999999' does not fit in an int");
  set("PADDLE_TRAINERS", "4");
  set("PADDLE_TRAINER_ID", "4");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINER_ID=4 is not below PADDLE_TRAINERS=4");
  set("PADDLE_TRAINER_ID", "-1");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINER_ID=-1 is negative");
}

TEST_F(Distributed, PaddleTrainersCountAndNumDisagree) {
  set("PADDLE_TRAINER_ID", "0");
  set("PADDLE_TRAINERS_NUM", "2");
  set("PADDLE_TRAINERS", "4");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS=4 but PADDLE_TRAINERS_NUM=2");
  set("PADDLE_TRAINERS", "1");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS=1 but PADDLE_TRAINERS_NUM=2");
  set("PADDLE_TRAINERS", "0");  // the count is checked before it is compared
  EXPECT_EQ(cause_of(), "PADDLE_TRAINERS=0 is less than 1");
}

TEST_F(Distributed, PaddleRankOutsideTheWorld) {
  set("PADDLE_TRAINER_ID", "-1");
  set("PADDLE_TRAINERS_NUM", "2");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINER_ID=-1 is negative");
  set("PADDLE_TRAINER_ID", "2");
  EXPECT_EQ(cause_of(), "PADDLE_TRAINER_ID=2 is not below PADDLE_TRAINERS_NUM=2");
  unset("PADDLE_TRAINERS_NUM");
  set("PADDLE_TRAINERS", "a:1,b:1");
  EXPECT_EQ(
      cause_of(),
      "PADDLE_TRAINER_ID=2 is not below the world size 2 (PADDLE_TRAINERS lists 2 endpoints)");
}

TEST_F(Distributed, ErrorsCarryTheirCauseInWhat) {
  set("SLURM_PROCID", "8");
  set("SLURM_NTASKS", "8");
  try {
    detect_distributed();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "invalid argument: SLURM_PROCID=8 is not below SLURM_NTASKS=8");
  }
}

}  // namespace
}  // namespace wds
