@echo off
rem kubectl (1.26 and later) completes the arguments of "kubectl cle" by running
rem this helper, found on PATH, with the words after "cle" and the word being
rem completed; kubectl-cle answers as its own __complete does.
kubectl-cle.exe __complete %*
