#include "process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hpctrain/core/system.h"

namespace hpctrain::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ProcessResult run_command(const std::string& command) {
  const std::string err_path = make_temp_dir("stderr") + "/stderr.txt";
  ProcessResult result;
  FILE* pipe = popen((command + " 2>" + err_path).c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.err = read_file(err_path);
  hpctrain::sys::remove_tree(std::filesystem::path(err_path).parent_path());
  return result;
}

std::string mpirun(int ranks) {
  return std::string(HPCTRAIN_MPIEXEC) + " --allow-run-as-root --oversubscribe" +
         " --mca pml ob1 --mca btl self,vader -np " + std::to_string(ranks) + " ";
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  int count = 0;
  while (std::getline(in, line)) count += line.find(needle) != std::string::npos ? 1 : 0;
  return count;
}

std::string make_temp_dir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("hpctrain_" + tag + "_XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) return "";
  return pattern;
}

}  // namespace hpctrain::testing
