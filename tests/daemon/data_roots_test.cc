// confine_to_data_roots: what lies under a root passes (resolved), what a symlink or ".." takes outside does not.
#include <filesystem>

#include <gtest/gtest.h>

#include "daemon/data_roots.h"
#include "test_util.h"

namespace soartune::daemon {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_file;

TEST(DataRoots, InsideIsAcceptedAndResolved) {
  TempDir dir;
  write_file(dir.file("root/sub/a.jsonl"), "{}\n");
  Result<std::string> r = confine_to_data_roots(dir.file("root/sub/../sub/a.jsonl"), {dir.file("root")}, "f");
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_EQ(r.value(), fs::canonical(dir.file("root/sub/a.jsonl")).string());
  // Not yet existing files under a root are judged by the path they would have.
  EXPECT_TRUE(confine_to_data_roots(dir.file("root/new.jsonl"), {dir.file("root")}, "f").ok());
}

TEST(DataRoots, SymlinksDotDotAndSiblingPrefixesAreOutside) {
  TempDir dir;
  write_file(dir.file("outside/s.jsonl"), "secret\n");
  fs::create_directories(dir.file("root"));
  fs::create_directories(dir.file("root2"));
  fs::create_symlink(dir.file("outside/s.jsonl"), dir.file("root/link.jsonl"));
  fs::create_symlink(dir.file("outside"), dir.file("root/dirlink"));
  const std::vector<std::string> roots = {dir.file("root")};
  for (const std::string& p : {dir.file("root/link.jsonl"), dir.file("root/dirlink/s.jsonl"),
                               dir.file("root/../outside/s.jsonl"), dir.file("root2/x"), std::string("/etc/passwd")}) {
    Result<std::string> r = confine_to_data_roots(p, roots, "accuracy.set");
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code, Code::kPermissionDenied);
    EXPECT_EQ(r.status().message.rfind("accuracy.set: ", 0), 0u) << r.status().message;
    EXPECT_EQ(r.status().message.find("secret"), std::string::npos);
  }
}

TEST(DataRoots, ARootThatIsASymlinkIsFollowed) {
  TempDir dir;
  write_file(dir.file("real/m/config.json"), "{}\n");
  fs::create_symlink(dir.file("real"), dir.file("alias"));
  EXPECT_TRUE(confine_to_data_roots(dir.file("alias/m"), {dir.file("alias")}, "model").ok());
  EXPECT_TRUE(confine_to_data_roots(dir.file("real/m"), {dir.file("alias")}, "model").ok());
}

}  // namespace
}  // namespace soartune::daemon
