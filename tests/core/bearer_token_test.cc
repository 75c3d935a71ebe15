// The bearer token as the daemon and the CLI both read it: the token file's text without the blanks around it,
// else $SOARTUNE_TOKEN; a file that cannot be read or holds only blanks is an error naming the setting and path.
#include "core/bearer_token.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace soartune {
namespace {

class BearerToken : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "bearer-token-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    ::unsetenv(kTokenEnv);
  }
  void TearDown() override {
    ::unsetenv(kTokenEnv);
    std::filesystem::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(BearerToken, TheFileWithoutTheBlanksAroundIt) {
  const auto token = read_bearer_token(write("token", "  s3cret-token\t\r\n"), "token_file");
  ASSERT_TRUE(token.ok()) << token.status().message;
  EXPECT_EQ(token.value(), "s3cret-token");
}

TEST_F(BearerToken, TheFileWinsOverTheEnvironment) {
  ::setenv(kTokenEnv, "from-env", 1);
  const auto token = read_bearer_token(write("token", "from-file\n"), "--token-file");
  ASSERT_TRUE(token.ok()) << token.status().message;
  EXPECT_EQ(token.value(), "from-file");
}

TEST_F(BearerToken, WithoutAFileTheEnvironmentOrNone) {
  auto none = read_bearer_token("", "token_file");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value(), "");
  ::setenv(kTokenEnv, " from-env \n", 1);
  auto env = read_bearer_token("", "token_file");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env.value(), "from-env");
}

TEST_F(BearerToken, AnUnreadableOrBlankFileIsAnErrorNamingTheSettingAndThePath) {
  const std::string missing = (dir_ / "missing").string();
  const auto unread = read_bearer_token(missing, "--token-file");
  ASSERT_FALSE(unread.ok());
  EXPECT_EQ(unread.status().code, Code::kInvalidArgument);
  EXPECT_EQ(unread.status().message, "--token-file: cannot read " + missing);
  const std::string blank = write("blank", " \n\t\n");
  const auto blanks = read_bearer_token(blank, "token_file");
  ASSERT_FALSE(blanks.ok());
  EXPECT_EQ(blanks.status().message, "token_file: " + blank + " is empty or holds only blanks");
  const std::string empty = write("empty", "");
  EXPECT_FALSE(read_bearer_token(empty, "token_file").ok());
}

}  // namespace
}  // namespace soartune
